"""Ownership on a real GPU (issue 9, item 8; run with --gpu). tools/gpu-check.sh also
runs this file under compute-sanitizer memcheck: the parent process must make no
memory error (the subprocesses run unsanitized: --target-processes application-only).

- use after close (item 1): views, plans, re-imports, imports of our memory by
  address (a hand-made CAI dict, a foreign CAI/DLPack wrapper) and closed streams,
  each checked against numpy on fresh random data;
- a sticky error (illegal address) raised in a subprocess leaves the parent's context
  working;
- a pinned buffer dropped while its asynchronous copy is in flight (both directions,
  plain and pooled);
- interpreter shutdown with kernels and copies in flight exits 0 with an empty stderr.

CPU counterparts (driver double): tests/interop/test_interop.py,
tests/memory/test_pool_stream_close.py, tests/memory/test_pool.py (the property test)."""
import gc
import os
import subprocess
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from ptx import gpu as ptx_kernels
from _helpers import fresh

pytestmark = pytest.mark.gpu

TIMEOUT = 180           # seconds, for every subprocess (the sanitizer slows the parent, not them)



DELAY_CYCLES = 200_000_000      # ~0.1 s at 2 GHz: long enough that what follows is queued behind it


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def vadd():
    return bc.Module.from_ptx(ptx_kernels.VADD).get_kernel("vadd")


@pytest.fixture
def delay():
    return bc.Module.from_ptx(ptx_kernels.DELAY).get_kernel("delay_then_mark")


def _vadd(vadd, out, a, b, n, stream=None):
    vadd.launch((n + 255) // 256, 256, out, a, b, n, stream=stream)


def _check_context_works(vadd, rng, n=100_003):
    """A launch on fresh random data, compared with numpy."""
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    out = bc.empty(n, "float32")
    _vadd(vadd, out, bc.to_device(a), bc.to_device(c), n)
    np.testing.assert_array_equal(out.to_numpy(), a + c)


def _run(code):
    """Run `code` in a fresh interpreter (the barecuda under test: conftest's
    PYTHONPATH), with a timeout; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=dict(os.environ, PYTHONFAULTHANDLER="1"))


# --------------------------------------------------------- use after close (item 1)
def test_view_write_after_owner_close_does_not_reach_a_new_allocation(rng):
    """The issue's first example: the owner's close() is deferred while the view lives,
    so a new allocation never shares the view's memory."""
    n = 1 << 16
    p = bc.to_device(np.zeros(n, np.float32))
    v = p.view("float32")
    p.close()
    want_q = fresh(n, "float32", rng)
    q = bc.to_device(want_q)
    assert q.ptr != v.ptr
    fill = fresh(n, "float32", rng)
    v.copy_from(fill)
    np.testing.assert_array_equal(q.to_numpy(), want_q)
    np.testing.assert_array_equal(v.to_numpy(), fill)
    with pytest.raises(ValueError, match="closed"):
        p.copy_from(fill)


def test_plan_launch_after_its_argument_was_closed(vadd, rng):
    """A plan holds its buffers: closing one defers the free, the plan still launches
    on valid memory and computes the right values."""
    n = 300_007
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    da, dc, out = bc.to_device(a), bc.to_device(c), bc.empty(n, "float32")
    plan = vadd.bind((n + 255) // 256, 256, out, da, dc, n)
    da.close()
    dc.close()
    junk = [bc.to_device(fresh(n, "float32", rng)) for _ in range(4)]   # would take freed memory
    plan()
    np.testing.assert_array_equal(out.to_numpy(), a + c)
    del plan, junk
    gc.collect()
    _check_context_works(vadd, rng)


@pytest.mark.parametrize("how", ["cai_dict_by_hand", "foreign_cai", "foreign_dlpack", "foreign_dlpack_capsule"])
def test_import_of_our_memory_by_address_holds_it_after_the_owners_close(vadd, rng, how):
    """A CAI dict built by hand, or another library's CAI/DLPack wrapper of our buffer,
    pins the owner: after p.close() a new allocation never gets that memory, and a
    kernel writing through the import lands in it (compared with numpy)."""
    from _helpers import IMPORTS
    n = 1 << 16
    p = bc.to_device(np.zeros(n, np.float32))
    w = IMPORTS[how](p)
    assert w.owner is p
    p.close()
    want_q = fresh(n, "float32", rng)
    q = bc.to_device(want_q)
    assert q.ptr != w.ptr
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    _vadd(vadd, w, bc.to_device(a), bc.to_device(c), n)
    np.testing.assert_array_equal(w.to_numpy(), a + c)
    np.testing.assert_array_equal(q.to_numpy(), want_q)


def test_closed_buffer_and_stream_are_refused_and_the_context_stays_healthy(vadd, rng):
    n = 4096
    a = bc.to_device(fresh(n, "float32", rng))
    out = bc.empty(n, "float32")
    a.close()
    with pytest.raises(ValueError, match="closed"):
        _vadd(vadd, out, a, a, n)                  # would pack address 0: a sticky fault
    s = bc.Stream()
    b = bc.to_device(fresh(n, "float32", rng))
    plan = vadd.bind((n + 255) // 256, 256, out, b, b, n, stream=s)
    s.close()
    with pytest.raises(ValueError, match="closed"):
        _vadd(vadd, out, b, b, n, stream=s)
    with pytest.raises(ValueError, match="closed"):
        plan()                                     # the plan's stream is closed
    plan.stream = None
    plan()
    np.testing.assert_array_equal(out.to_numpy(), b.to_numpy() * 2)
    _check_context_works(vadd, rng)


@pytest.mark.parametrize("how", ["cai", "dlpack", "to_numpy", "copy", "view"])
def test_buffer_whose_stream_was_closed_with_work_in_flight(vadd, delay, rng, how):
    """Work still queued on a closed stream finishes before any later use of the
    buffer reads it (re-imports, exports, copies, views): the values are final."""
    n = 1 << 20
    a, c = fresh(n, "float32", rng), fresh(n, "float32", rng)
    da, dc = bc.to_device(a), bc.to_device(c)
    s = bc.Stream(non_blocking=True)
    b = bc.zeros(n, "float32", stream=s)
    scratch = bc.empty(256, "uint32", stream=s)
    delay.launch(1, 256, scratch, DELAY_CYCLES, stream=s)
    _vadd(vadd, b, da, dc, n, stream=s)          # queued behind the delay
    s.close()
    if how == "cai":
        r = bc.DeviceBuffer.from_cuda_array_interface(b)
    elif how == "dlpack":
        r = bc.DeviceBuffer.from_dlpack(b)
    elif how == "copy":
        r = b.copy()
    elif how == "view":
        r = b[0:n]
    else:
        r = b
    np.testing.assert_array_equal(r.to_numpy(), a + c)
    assert b.stream is None
    del r, scratch
    b.close()


def test_view_used_on_another_stream_holds_the_block(delay):
    """Issue 9 item 2 on the GPU: a view launched on another stream marks the owner, so
    the pool does not hand its block to the owner's stream before that kernel ends."""
    pool = bc.MemoryPool(0)
    s1, s2 = bc.Stream(non_blocking=True), bc.Stream(non_blocking=True)
    n = 256
    b = pool.alloc(n * 4, stream=s1)
    b.memset(0xFF)
    v = b.view("uint32")
    delay.launch(1, n, v, DELAY_CYCLES, stream=s2)    # writes tid to v[tid] after the delay
    del v
    b.close()
    c = pool.alloc(n * 4, stream=s1)
    c.memset(0xAB, stream=s1)
    bc.Device(0).synchronize()
    got = np.frombuffer(c.copy_to(), np.uint8)
    assert (got == 0xAB).all(), "the late kernel on s2 wrote into a block given out again"
    c.close()
    pool.trim()


# ------------------------------------------------------------- sticky error (item 8)
def test_sticky_error_in_a_subprocess_leaves_the_parent_working(vadd, rng):
    _check_context_works(vadd, rng)                 # the parent's context exists first
    child = _run(f"""
        import barecuda as bc
        k = bc.Module.from_ptx({ptx_kernels.POKE!r}).get_kernel("poke")
        k.launch(1, 1, 8)                           # an unmapped address: illegal address
        try:
            bc.Device(0).synchronize()
        except bc.CudaError as e:
            print("first", e.code, type(e).__name__, e.sticky)
        try:                                        # sticky: the context stays lost
            bc.to_device(b"x" * 64).copy_to()
        except bc.CudaError as e:
            print("again", e.code, e.sticky)
    """)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.split("\n")
    # an illegal address (700), or on some GPUs the generic launch failure (719): both sticky
    assert lines[0].split()[:2] in (["first", "700"], ["first", "719"]), child.stdout
    assert lines[0].endswith(" True"), child.stdout
    assert lines[1].startswith("again ") and lines[1].endswith(" True"), child.stdout
    _check_context_works(vadd, rng)                 # unaffected
    s = bc.Stream()
    _check_context_works(vadd, rng)
    s.synchronize()


# ---------------------------------------- pinned buffer dropped mid-copy (item 8)
@pytest.mark.parametrize("pooled", [False, True], ids=["pinned", "pinned_pool"])
@pytest.mark.parametrize("side", ["source", "destination"])
def test_pinned_buffer_dropped_while_its_copy_is_in_flight(delay, rng, pooled, side):
    """The pinned side of a copy queued behind a delay is dropped before the copy runs,
    and pinned memory is taken (and overwritten) meanwhile. The late copy must not read
    that memory (source: the device copy equals the data) nor write into it
    (destination: the buffers taken meanwhile keep their bytes)."""
    n = 64 << 20
    pool = bc.PinnedMemoryPool(0) if pooled else None
    new_pinned = pool.empty if pooled else bc.PinnedBuffer
    s = bc.Stream(non_blocking=True)
    scratch = bc.empty(256, "uint32", stream=s)
    want = fresh(n, "uint8", rng)
    if side == "source":
        dev = bc.empty(n, "uint8", stream=s)
        pinned = new_pinned(n)
        host = np.frombuffer(pinned, np.uint8)
        host[:] = want
        del host                                    # no export left: the drop below is real
    else:
        dev = bc.to_device(want, stream=s)
        pinned = new_pinned(n)
    delay.launch(1, 256, scratch, DELAY_CYCLES, stream=s)
    if side == "source":
        dev.copy_from(pinned, stream=s)             # queued behind the delay
    else:
        dev.copy_to(pinned, stream=s)
    del pinned                                      # dropped while the copy is in flight
    gc.collect()
    others = [new_pinned(n) for _ in range(2)]
    for o in others:
        np.frombuffer(o, np.uint8)[:] = 0x5A
    s.synchronize()
    if side == "source":
        np.testing.assert_array_equal(dev.to_numpy(), want)
    else:
        for o in others:
            assert (np.frombuffer(o, np.uint8) == 0x5A).all(), "the copy wrote into memory given out again"
    del others, scratch
    gc.collect()
    if pool is not None:
        pool.trim()
    if pool is not None:
        pool.trim()


# ------------------------------------------- interpreter shutdown (item 8)
@pytest.mark.parametrize("where", ["globals", "cycle", "exit"])
def test_interpreter_shutdown_with_kernels_and_copies_in_flight(where):
    """Kernels, copies, plans, pool blocks and streams still busy at exit: the process
    exits 0, prints nothing on stderr (no CudaWarning, no traceback, no crash)."""
    child = _run(f"""
        import gc, sys
        import numpy as np
        import barecuda as bc
        delay = bc.Module.from_ptx({ptx_kernels.DELAY!r}).get_kernel("delay_then_mark")
        vadd = bc.Module.from_ptx({ptx_kernels.VADD!r}).get_kernel("vadd")
        n = 16 << 20
        s = bc.Stream(non_blocking=True)
        s2 = bc.Stream()
        a = bc.to_device(np.ones(n, np.float32), stream=s)
        b = bc.empty(n, "float32", stream=s)
        pin = bc.PinnedBuffer(n * 4)
        pool = bc.MemoryPool(0)
        c = pool.alloc(n * 4, stream=s2)
        marks = bc.empty(256, "uint32", stream=s)
        delay.launch(1, 256, marks, {DELAY_CYCLES * 10}, stream=s)     # ~1 s
        plan = vadd.bind((n + 255) // 256, 256, b, a, a, n, stream=s)
        for _ in range(3):
            plan()
        b.copy_to(pin, stream=s)                   # device -> pinned, queued
        c.copy_from(pin, stream=s2)                # pinned -> device on another stream
        v = a.view("int32")
        delay.launch(1, 256, v, {DELAY_CYCLES * 10}, stream=s2)
        a.close()                                  # deferred: the view holds it
        if {where!r} == "cycle":
            box = [s, s2, a, b, pin, pool, c, plan, v]
            box.append(box)
            del s, s2, a, b, pin, pool, c, plan, v, box
        elif {where!r} == "exit":
            sys.exit(0)
        # "globals": everything is still bound at module level
    """)
    assert child.returncode == 0, f"exit {child.returncode}; stderr:\n{child.stderr}"
    assert child.stderr == "", child.stderr
