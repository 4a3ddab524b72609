"""Issue 21 on the real GPU (run with --gpu): close() racing a call in flight, and IPC
handles with bad bounds.

- The close-race stress of tests/test_close_races.py without the driver double's delay
  knob: a worker thread memsets / copies into a buffer (or on a stream) while the main
  thread closes it and at once allocates the same size from the same caching pool and
  fills it with random bytes. The closer's buffer must keep its bytes (compared with
  numpy after everything is synchronized) and the worker must see either success or
  "closed". Fixed seed, time cap.
- ``test_ipc_open_bad_bounds_gpu``: a child process (spawn) is handed a handle whose
  offset or size reaches past the exported allocation: ``open_buffer`` raises IpcError,
  and the same allocation then opens through the good handle (the mapping was closed).
"""
import multiprocessing as mp
import os
import pickle
import random
import threading
import time

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import ipc
from _helpers import join_all

pytestmark = pytest.mark.gpu

SEED = 21
CAP_S = 6.0
N = 8 << 20                 # 8 MiB: a memset or copy of this size keeps the driver busy a while


def _closed(e):
    return isinstance(e, ValueError) and "closed" in str(e)


def _stress(make_work, cap_s=CAP_S, trials=200):
    rng = random.Random(SEED)
    nrng = np.random.default_rng(SEED)
    pool = bc.MemoryPool(0)
    failures = []
    end = time.monotonic() + cap_s
    n = 0
    try:
        while n < trials and time.monotonic() < end:
            n += 1
            b = pool.alloc(N)
            work = make_work(b)
            errors = []
            go = threading.Event()

            def worker():
                go.set()
                try:
                    work()
                except BaseException as e:      # noqa: B036 -- reported below
                    errors.append(e)
            t = threading.Thread(target=worker, daemon=True)
            t.start()
            go.wait(5)
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0, 50e-6))
            b.close()
            nb = pool.alloc(N)
            pattern = nrng.integers(0, 256, N, dtype=np.uint8)
            nb.copy_from(pattern)
            join_all([t], timeout=60)
            bc.Device(0).synchronize()
            failures += [f"trial {n}: {e!r}" for e in errors if not _closed(e)]
            got = np.frombuffer(nb.copy_to(), np.uint8)
            if not np.array_equal(got, pattern):
                failures.append(f"trial {n}: the closer's new buffer was overwritten "
                                f"({int((got != pattern).sum())} bytes differ)")
            nb.close()
    finally:
        bc.Device(0).synchronize()
        pool.trim()
    return n, failures


def test_buffer_close_races_memset_gpu():
    n, failures = _stress(lambda b: (lambda: b.memset(0x5A)))
    assert n >= 10 and not failures, "\n".join(failures[:20])


def test_buffer_close_races_copy_gpu():
    src = np.full(N, 0xC3, np.uint8)
    n, failures = _stress(lambda b: (lambda: b.copy_from(src)))
    assert n >= 10 and not failures, "\n".join(failures[:20])


def test_buffer_close_races_launch_gil_released_gpu():
    """A memset kernel launched with the GIL released (the one launch path that holds a
    use count), writing 0xA5 bytes over the whole buffer."""
    from barecuda import _launch
    src = r"""
    extern "C" __global__ void fill(unsigned char *p, unsigned long long n) {
        for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
             i += (unsigned long long)gridDim.x * blockDim.x) p[i] = 0xA5;
    }"""
    try:
        k = bc.Program(src).compile().get_kernel("fill")
    except bc.CompilerNotFoundError as e:
        pytest.skip(f"no NVRTC: {e}")
    old = _launch.set_launch_releases_gil(True)
    try:
        n, failures = _stress(lambda b: (lambda: (k.launch(264, 256, b, N), bc.Device(0).synchronize())))
    finally:
        _launch.set_launch_releases_gil(old)
    assert n >= 10 and not failures, "\n".join(failures[:20])


def test_stream_close_races_memset_gpu():
    rng = random.Random(SEED)
    b = bc.alloc(N)
    failures = []
    end = time.monotonic() + CAP_S
    trials = 0
    while trials < 200 and time.monotonic() < end:
        trials += 1
        s = bc.Stream()
        errors = []
        go = threading.Event()

        def worker(s=s):
            go.set()
            try:
                b.memset(trials & 0xFF, stream=s)
                s.synchronize()
            except BaseException as e:          # noqa: B036
                errors.append(e)
        t = threading.Thread(target=worker, daemon=True)
        t.start()
        go.wait(5)
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0, 50e-6))
        s.close()
        ns = bc.Stream()
        join_all([t], timeout=60)
        ns.close()
        failures += [f"trial {trials}: {e!r}" for e in errors if not _closed(e)]
    bc.Device(0).synchronize()
    b.close()
    assert trials >= 10 and not failures, "\n".join(failures[:20])


# ---------------------------------------------------------------------------- IPC
def _open_bad_then_good(bad, good, q):
    import numpy as np
    import barecuda as bc
    from barecuda import ipc
    try:
        try:
            v = ipc.open_buffer(bad)
            v.close()
            q.put(("err", "the handle with bad bounds opened"))
            return
        except bc.IpcError as e:
            refused = str(e)
        v = ipc.open_buffer(good)                   # the mapping was closed: opens again
        got = np.frombuffer(v.copy_to(), np.uint8).copy()
        v.close()
        q.put(("ok", (refused, got)))
    except BaseException as ex:  # noqa: BLE001 - reported to the parent
        q.put(("err", f"{type(ex).__name__}: {ex}"))


@pytest.mark.parametrize("where", ["offset", "size"])
def test_ipc_open_bad_bounds_gpu(where, monkeypatch):
    for k, v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}.items():
        monkeypatch.setenv(k, os.environ.get(k, v))
    data = np.random.default_rng(SEED).integers(0, 256, 1 << 20, dtype=np.uint8)
    buf = bc.ipc.IpcAllocator(0).alloc(data.nbytes)
    buf.copy_from(data)
    good = ipc.export_buffer(buf)
    bad = pickle.loads(pickle.dumps(good))
    if where == "offset":
        bad.offset = 1 << 34                      # 16 GiB past the start
    else:
        bad.nbytes = 1 << 34
        bad.shape = (1 << 34,)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_open_bad_then_good, args=(bad, good, q))
    p.start()
    try:
        status, payload = q.get(timeout=120)
    finally:
        p.join(60)
    good.release()
    buf.close()
    assert status == "ok", payload
    refused, got = payload
    assert "malformed or forged" in refused
    np.testing.assert_array_equal(got, data)
