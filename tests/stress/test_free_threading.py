"""Threads without a GIL: the launch path, plans, set_arg, buffers and the registries
hammered from 8 threads on the driver double (docs/architecture.md, "Free-threaded
CPython: what is protected").

The tests run on every interpreter; on a free-threaded one (3.13t/3.14t, built with
``Py_GIL_DISABLED``) nothing serialises the threads but barecuda's own critical
sections, mutexes and atomic counts, which is what they are for. With the GIL they
still check that those protections change no result.

What is checked: no exception in any thread; the double saw exactly the launches the
threads counted; every round trip returns the bytes that went in; a plan that all the
threads repack at once ends with one thread's complete argument set; the pool's and the
compile cache's counts are exact; the registry loads one module per key; and afterwards
no handle of any kind is left alive. A fixed seed per thread; a time cap stops the
iterations early on a slow machine (the counts are compared whatever was done).
"""
import gc
import os
import subprocess
import sys
import sysconfig
import threading
import time

import pytest

import barecuda as bc
from barecuda import _compile_cache, _staging
from _helpers import join_all, live_mem_after_gc

np = pytest.importorskip("numpy")

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
THREADS = 8
ITERATIONS = 150
TIME_CAP = 60.0             # seconds for the iterations of all threads together
N = 64                      # float32 elements per buffer
SEED = 20261126


def _live(fake):
    return {k: fake.live(k) for k in ("mem", "host_mem", "host_register", "stream", "event", "module", "pool")}


class _ForeignStream:
    """Another library's stream object (``__cuda_stream__``): barecuda remembers such
    objects in a small table that every thread reads and replaces."""

    def __init__(self, handle):
        self._h = handle

    def __cuda_stream__(self):
        return (0, self._h)


class _Cai:
    """Another library's array over our memory, by address: importing it resolves the
    address through the table of live allocations and pins its owner."""

    def __init__(self, b):
        self.__cuda_array_interface__ = {"data": (b.ptr, False), "shape": (b.nbytes // 4,), "typestr": "<f4",
                                         "version": 3, "stream": None}


def _run(threads_fn, n=THREADS):
    errors = []
    start = threading.Barrier(n, timeout=60)

    def wrap(tid):
        try:
            start.wait()
            threads_fn(tid)
        except BaseException as e:  # noqa: BLE001 - reported below, by thread
            errors.append((tid, repr(e)))

    threads = [threading.Thread(target=wrap, args=(t,), daemon=True) for t in range(n)]
    for t in threads:
        t.start()
    join_all(threads, timeout=TIME_CAP + 120)
    return errors


def test_launches_plans_buffers_from_eight_threads(fake, ptx):
    before = _live(fake)
    saved = bc.configure_staging()
    bc.configure_staging(chunk_bytes=128, chunks=2, threads=2, threshold=0, min_piece=64, min_part=64)
    kernel = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")      # vadd(out, a, b, n)
    pool = bc.MemoryPool(0)
    shared_bufs = [bc.empty(N, "float32", allocator=pool) for _ in range(4)]
    shared_plan = kernel.bind(1, 32, shared_bufs[0], shared_bufs[1], shared_bufs[2], 0)
    counts = [0] * THREADS
    rounds = [0] * THREADS
    streams = []
    deadline = time.monotonic() + TIME_CAP
    launches0 = fake.launch_count()

    def work(tid):
        rng = np.random.default_rng(SEED + tid)
        s = bc.Stream()
        streams.append(s)
        launches = 0
        for i in range(ITERATIONS):
            if time.monotonic() > deadline:
                break
            src = rng.standard_normal(N, dtype=np.float32)
            buf = bc.empty(N, "float32", stream=s, allocator=pool)
            buf.copy_from(src, stream=s)                                   # staged host->device
            # Kernel.launch, on our Stream and on a foreign stream object
            kernel.launch(1, 32, buf, buf, buf, i, stream=_ForeignStream(s.handle_int) if i % 2 else s)
            launches += 1
            # a view (pins the owner) and an import by address (the table of live allocations)
            half = buf[: N // 2]
            imp = bc.as_device_buffer(_Cai(buf))
            assert imp.ptr == buf.ptr
            plan = kernel.bind(1, 32, imp, buf, half, 0, stream=s)
            plan.set_arg(3, i + 1)
            plan()
            bc.PlanList([plan, plan])()
            bc.launch_all([plan])
            launches += 4
            # one plan that every thread repacks and launches at once
            k = int(rng.integers(len(shared_bufs)))
            shared_plan.set_arg(0, shared_bufs[k])
            shared_plan.set_arg(3, tid)
            shared_plan()
            launches += 1
            out = np.empty(N, dtype=np.float32)
            buf.copy_to(out, stream=s)                                     # staged device->host
            s.synchronize()
            if not np.array_equal(out, src):
                raise AssertionError(f"thread {tid} iteration {i}: round trip changed the data")
            buf.close()             # the plan, the view and the import still pin it: the free waits
            del plan, half, imp
            rounds[tid] += 1
        counts[tid] = launches

    try:
        errors = _run(work)
        assert not errors, errors[:5]
        assert all(r > 0 for r in rounds), rounds
        assert fake.launch_count() - launches0 == sum(counts)
        last = shared_plan.args
        assert any(last[0] is b for b in shared_bufs) and last[3] in range(THREADS)
        del last
        gc.collect()
        stats = pool.stats()
        # only the shared buffers are in use: every thread's buffer went back exactly once
        assert stats["in_use"] == sum(b.nbytes for b in shared_bufs), stats
        assert stats["cache_hits"] + stats["cache_misses"] == len(shared_bufs) + sum(rounds), stats
    finally:
        bc.configure_staging(**saved)
    del shared_plan, shared_bufs, kernel
    gc.collect()
    pool.trim()
    del pool
    gc.collect()
    for s in streams:
        s.close()
    _staging.release()
    gc.collect()
    assert _live(fake) == before, f"live handles before {before}, after {_live(fake)}"


def test_set_arg_and_close_from_eight_threads(fake, ptx):
    """set_arg swapping buffers in one plan while other threads close them: each buffer's
    free runs exactly once, after the plan let go of it (no double unpin, no early free)."""
    before = live_mem_after_gc(fake)
    kernel = bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")
    bufs = [bc.alloc(N * 4) for _ in range(THREADS * 8)]
    plan = kernel.bind(1, 32, bufs[0], bufs[0], bufs[0], 0)

    def work(tid):
        rng = np.random.default_rng(SEED + tid)
        mine = bufs[tid::THREADS]
        for b in mine:
            for _ in range(20):
                try:
                    plan.set_arg(int(rng.integers(3)), bufs[int(rng.integers(len(bufs)))])
                except ValueError:          # a buffer another thread closed meanwhile
                    pass
            b.close()

    errors = _run(work)
    assert not errors, errors[:5]
    assert all(b.is_closed for b in bufs)
    del plan
    assert live_mem_after_gc(fake) == before


def test_registry_loads_one_module_per_key(fake, ptx, monkeypatch):
    """barecuda.kernels' registry from 8 threads at once: one load per key, one Kernel
    object for every caller."""
    from barecuda.kernels import _registry as R
    loads = []
    lock = threading.Lock()

    def slow_module(source, defines, device, ordinal):
        with lock:
            loads.append((source, defines, ordinal))
        time.sleep(0.01)                    # every thread arrives while the first one loads
        return bc.Module.from_ptx(ptx.VADD)

    monkeypatch.setattr(R, "_module", slow_module)
    monkeypatch.setattr(R, "_kernels", {})
    got = [[] for _ in range(THREADS)]

    def work(tid):
        for j in range(4):
            got[tid].append(R.get(f"stress{j}.cu", "vadd", (("T", j),), device=0))

    errors = _run(work)
    assert not errors, errors[:5]
    assert sorted(loads) == sorted((f"stress{j}.cu", (("T", j),), 0) for j in range(4))
    for j in range(4):
        assert len({id(g[j]) for g in got}) == 1


def test_compile_cache_counts_are_exact():
    before = _compile_cache.cache_info()["memory_hits"]

    def work(tid):
        for _ in range(2000):
            _compile_cache._count("memory_hits")

    errors = _run(work)
    assert not errors, errors[:5]
    assert _compile_cache.cache_info()["memory_hits"] - before == THREADS * 2000


def test_gil_stays_disabled_after_importing_every_module():
    """Every extension module (barecuda._cyutility, the kernels and models wings and the
    benchmark wing included) declares itself free-threading compatible: importing all of
    them in a fresh interpreter leaves the GIL off."""
    if not FREE_THREADED:
        pytest.skip("needs a free-threaded interpreter (3.13t/3.14t)")
    code = r"""
import importlib, pkgutil, sys
import barecuda
names = sorted(m.name for m in pkgutil.walk_packages(barecuda.__path__, "barecuda.")
               if not m.name.endswith("__main__"))
mods = [importlib.import_module(n) for n in names]
ext = [n for n, m in zip(names, mods) if (getattr(m, "__file__", "") or "").endswith((".so", ".pyd"))]
assert "barecuda._cyutility" in ext, ext
print(len(names), len(ext), sys._is_gil_enabled())
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    n, n_ext, enabled = r.stdout.split()
    assert enabled == "False", f"importing barecuda's {n} modules ({n_ext} extensions) turned the GIL on:\n{r.stderr}"
    assert int(n_ext) >= 30
