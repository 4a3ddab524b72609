"""Copies and memsets in a stream capture, against the fake driver: the captured graph
holds both sides of every copy and memset (no keep_alive needed), host memory must be
pinned (PinnedBuffer) and is held too, operations that cannot be captured are refused
before any driver call with a CudaStreamCaptureError naming them, and the capture goes
on.

Buffers come from a DriverAllocator (no cache): a buffer the graph did not hold is
really freed when dropped, and the double fails a graph launch that copies to or from
freed device memory, or host memory that is no longer page-locked
(tests/fakecuda/exec.c, replay_node).
"""
import ctypes
import gc
import weakref

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import barecuda as bc
from barecuda import _staging

np = pytest.importorskip("numpy")


def read(ptr, n):
    return ctypes.string_at(ptr, n)


def write(ptr, data):
    ctypes.memmove(ptr, data, len(data))


def pattern(n, rng):
    return bytes(rng.integers(0, 256, n, dtype=np.uint8))


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def da(fake):
    return bc.DriverAllocator(0)


def live(fake):
    return fake.live("mem"), fake.live("host_mem")


def pinned_of(arr):
    """The PinnedBuffer under an array from pinned_empty."""
    o = arr
    while not isinstance(o, bc.PinnedBuffer):
        o = o.obj if isinstance(o, memoryview) else o.base
    return o


def settle():
    gc.collect()
    bc.Device(0).synchronize()


# ------------------------------------------------------------- what is held
@pytest.mark.parametrize("how", ["drop", "close"])
def test_captured_copies_and_memsets_hold_both_sides(fake, da, rng, how):
    """Every capturable copy entry point and memset, captured; then every source and
    every destination but the ones read back is dropped (or closed). The graph and its
    executable hold them: replays copy the same bytes again, and everything is freed
    with the last of the graph and the executable."""
    s = bc.Stream()
    n = 256
    settle()
    base = live(fake)

    def dev():
        return bc.alloc(n, stream=s, allocator=da)

    src_d, src_d2, src_2d, src_3d = dev(), dev(), dev(), dev()
    src_p = bc.PinnedBuffer(n)
    src_arr = bc.pinned_empty(n)                         # numpy array over a PinnedBuffer
    t_d2d, t_to, t_set, t_h2d, t_arr, t_2d, t_copy_src = dev(), dev(), dev(), dev(), dev(), dev(), dev()
    out_p, out_3d = bc.PinnedBuffer(n), bc.PinnedBuffer(n)
    data = {}
    for name, buf in [("d", src_d), ("d2", src_d2), ("2d", src_2d), ("3d", src_3d), ("cs", t_copy_src)]:
        data[name] = pattern(n, rng)
        write(buf.ptr, data[name])
    data["p"], data["arr"] = pattern(n, rng), pattern(n, rng)
    memoryview(src_p)[:] = data["p"]
    src_arr[:] = np.frombuffer(data["arr"], np.uint8)
    with s.capture() as g:
        t_d2d.copy_from(src_d, stream=s)                 # device to device
        src_d2.copy_to(t_to, stream=s)                   # device to device, the other way
        t_set.memset(0x5A, stream=s)
        t_h2d.copy_from(src_p, stream=s)                 # pinned -> device
        t_arr.copy_from(src_arr, stream=s)               # array over pinned memory -> device
        t_d2d.copy_to(out_p, stream=s)                   # device -> pinned
        bc.copy_2d(t_2d, src_2d, 16, n // 16, stream=s)
        bc.copy_3d(out_3d, src_3d, 16, 4, n // 64, stream=s)
        dup = bc.to_device(t_copy_src, stream=s)         # to_device of a device array: graph memory + copy
    assert [x.kind for x in g.nodes()].count("memcpy") == 8
    outs = {"d2d": t_d2d, "to": t_to, "set": t_set, "h2d": t_h2d, "arr": t_arr, "2d": t_2d}
    expect = {"d2d": data["d"], "to": data["d2"], "set": b"\x5a" * n, "h2d": data["p"], "arr": data["arr"],
              "2d": data["2d"]}
    dropped = [src_d, src_d2, src_2d, src_3d, src_p, t_copy_src]
    refs = [weakref.ref(x) for x in dropped] + [weakref.ref(pinned_of(src_arr))]
    if how == "close":
        for x in dropped:
            x.close()
        del x
    del src_d, src_d2, src_2d, src_3d, src_p, src_arr, t_copy_src, dropped, buf
    gc.collect()
    assert all(r() is not None for r in refs)            # the graph holds them
    exe = g.instantiate()
    del g
    gc.collect()
    assert all(r() is not None for r in refs)            # ... and so does the executable
    for _ in range(3):
        for b in outs.values():
            write(b.ptr, bytes(n))
        write(out_p.ptr, bytes(n))
        write(out_3d.ptr, bytes(n))
        exe.launch(s)                                    # the double fails on freed memory
        s.synchronize()
        assert {k: read(b.ptr, n) for k, b in outs.items()} == expect
        assert bytes(out_p) == data["d"] and bytes(out_3d) == data["3d"]
    del exe, dup
    settle()
    assert all(r() is None for r in refs)
    del outs, t_d2d, t_to, t_set, t_h2d, t_arr, t_2d, out_p, out_3d, b
    settle()
    assert live(fake) == base                            # nothing leaked


def test_closing_a_pinned_buffer_a_graph_copies_defers_its_free(fake, da, rng):
    """PinnedBuffer.close() while a graph (captured or explicit) copies from it: closed
    for the caller at once, the memory freed by the last holder, after the context is
    done with it."""
    s = bc.Stream()
    n = 128
    settle()
    h0 = fake.live("host_mem")
    src = bc.PinnedBuffer(n)
    data = pattern(n, rng)
    memoryview(src)[:] = data
    dst, dst2 = bc.alloc(n, stream=s, allocator=da), bc.alloc(n, stream=s, allocator=da)
    with s.capture() as g:
        dst.copy_from(src, stream=s)
    eg = bc.Graph()
    eg.add_memcpy(dst2, src)
    src.close()
    assert src.is_closed and src.ptr == 0 and src.nbytes == 0 and len(src) == 0
    with pytest.raises(BufferError):
        memoryview(src)
    with pytest.raises(ValueError, match="closed"):
        dst.copy_from(src, stream=s)
    assert fake.live("host_mem") == h0 + 1               # not freed yet
    src.close()                                          # idempotent
    exes = [g.instantiate(), eg.instantiate()]
    for e in exes:
        e.launch(s)
    s.synchronize()
    assert read(dst.ptr, n) == data and read(dst2.ptr, n) == data
    del g, exes[0]
    gc.collect()
    assert fake.live("host_mem") == h0 + 1               # the explicit graph still holds it
    syncs = fake.calls("cuCtxSynchronize")
    del eg, exes, e
    gc.collect()
    assert fake.live("host_mem") == h0                   # the last holder freed it ...
    assert fake.calls("cuCtxSynchronize") == syncs + 1   # ... after waiting for the context
    del src
    gc.collect()
    assert fake.live("host_mem") == h0


def test_failed_deferred_free_of_a_pinned_buffer_warns_and_never_raises(fake):
    """The last holder's deferred free of a closed PinnedBuffer runs in a destructor: a
    driver failure there is a CudaWarning naming the bytes and the call, not an exception,
    and the buffer ends closed and empty."""
    n = 96
    src = bc.PinnedBuffer(n)
    dst = bc.DeviceBuffer(n)
    g = bc.Graph()
    g.add_memcpy(dst, src)
    src.close()                                          # deferred: the graph holds it
    fake.fail("cuMemFreeHost", 999)                      # the free itself fails (the memory stays: leaked)
    with pytest.warns(bc.CudaWarning, match=rf"deferred free of PinnedBuffer \({n} bytes\) failed.*cuMemFreeHost"):
        del g
        gc.collect()
    assert src.is_closed and src.ptr == 0 and src.nbytes == 0
    dst.close()


def test_only_streams_in_the_capture_are_held(fake, da):
    """A copy on a stream outside the capture runs at once and is not held; one on a
    stream joined to the capture (event wait) is."""
    s, side, other = bc.Stream(), bc.Stream(), bc.Stream()
    a, b, c, d = (bc.alloc(64, stream=s, allocator=da) for _ in range(4))
    refs = [weakref.ref(x) for x in (a, b, c, d)]
    with s.capture() as g:
        b.copy_from(a, stream=s)
        side.wait(s.record(timing=False))                # fork ...
        d.copy_from(c, stream=side)
        s.wait(side.record(timing=False))                # ... and join
        e = bc.alloc(64, stream=other, allocator=da)
        e.copy_from(a, stream=other)                     # not captured: runs now
    ref_e = weakref.ref(e)
    del a, b, c, d, e
    gc.collect()
    assert [r() is not None for r in refs] == [True] * 4 and ref_e() is None
    g.instantiate().launch(s)
    s.synchronize()
    del g
    gc.collect()
    assert all(r() is None for r in refs)


def test_graph_memory_in_copies_is_not_held(fake):
    """A pool buffer allocated in the capture is graph memory: copies do not hold it, so
    dropping it in the capture makes a free node (the executable can be relaunched)."""
    s = bc.Stream()
    pool = bc.MemoryPool(0)
    a, out = pool.alloc(4096, stream=s), pool.alloc(4096, stream=s)
    write(a.ptr, bytes(range(256)) * 16)
    with s.capture() as g:
        tmp = pool.alloc(4096, stream=s)
        tmp.copy_from(a, stream=s)
        out.copy_from(tmp, stream=s)
        ref = weakref.ref(tmp)
        del tmp                                          # a free node
        assert ref() is None
    assert [x.kind for x in g.nodes()] == ["mem_alloc", "memcpy", "memcpy", "mem_free"]
    exe = g.instantiate()
    for _ in range(2):
        exe.launch(s)
        s.synchronize()
    assert read(out.ptr, 4096) == bytes(range(256)) * 16


# ------------------------------------------------------ what is refused
def _entry_points():
    """(id, the call the error names, fn(a, s) run inside a capture of s; a is on s)."""
    arr = np.arange(256, dtype=np.uint8)
    return [
        ("copy_from_pageable", "DeviceBuffer.copy_from", lambda a, s, o: a.copy_from(arr, stream=s)),
        ("copy_from_bytes", "DeviceBuffer.copy_from", lambda a, s, o: a.copy_from(bytes(256), stream=s)),
        ("copy_from_no_stream", "DeviceBuffer.copy_from", lambda a, s, o: a.copy_from(o)),
        ("copy_from_pinned_no_stream", "DeviceBuffer.copy_from",
         lambda a, s, o: a.copy_from(bc.PinnedBuffer(256))),
        ("copy_to_pageable", "DeviceBuffer.copy_to", lambda a, s, o: a.copy_to(np.empty(256, np.uint8), stream=s)),
        ("copy_to_new", "DeviceBuffer.copy_to", lambda a, s, o: a.copy_to(stream=s)),
        ("copy_to_no_stream", "DeviceBuffer.copy_to", lambda a, s, o: a.copy_to(o)),
        ("copy_to_pinned_no_stream", "DeviceBuffer.copy_to", lambda a, s, o: a.copy_to(bc.PinnedBuffer(256))),
        ("to_numpy", "DeviceBuffer.to_numpy", lambda a, s, o: a.to_numpy(stream=s)),
        ("copy_no_stream", "DeviceBuffer.copy", lambda a, s, o: a.copy()),
        ("to_device_pageable", "to_device", lambda a, s, o: bc.to_device(arr, stream=s)),
        ("memset_no_stream", "DeviceBuffer.memset", lambda a, s, o: a.memset(0)),
        ("copy_2d_pageable", "copy_2d", lambda a, s, o: bc.copy_2d(a, arr, 16, 16, stream=s)),
        ("copy_2d_no_stream", "copy_2d", lambda a, s, o: bc.copy_2d(a, o, 16, 16)),
        ("copy_3d_pageable", "copy_3d", lambda a, s, o: bc.copy_3d(np.empty(256, np.uint8), a, 16, 4, 4, stream=s)),
        ("copy_3d_no_stream", "copy_3d", lambda a, s, o: bc.copy_3d(o, a, 16, 4, 4)),
        ("copy_htod_pageable", "copy_htod", lambda a, s, o: _staging.copy_htod(a.ptr, arr, stream=s)),
        ("copy_dtoh", "copy_dtoh", lambda a, s, o: _staging.copy_dtoh(np.empty(256, np.uint8), a.ptr, stream=s)),
    ]


ENTRY_POINTS = _entry_points()


@pytest.fixture(params=["plain", "staged"])
def staging(request, fake):
    """Small copies take the driver's plain path; with the threshold lowered, the same
    copies go through the pinned staging chunks."""
    if request.param == "plain":
        yield
        return
    old = bc.configure_staging()["threshold"]
    bc.configure_staging(threshold=64)
    try:
        yield
    finally:
        bc.configure_staging(threshold=old)


@pytest.mark.parametrize("name, call, fn", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_uncapturable_copies_are_refused_and_the_capture_goes_on(fake, da, staging, name, call, fn):
    """Caught inside the block: the error names the operation, nothing was queued, the
    capture stays valid and ends with the work around it."""
    s = bc.Stream()
    a, o, b = (bc.alloc(256, stream=s, allocator=da) for _ in range(3))
    write(a.ptr, bytes(range(256)))
    counts = {c: fake.calls(c) for c in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpy2DAsync",
                                          "cuMemcpy3DAsync", "cuMemcpyDtoDAsync", "cuMemsetD8Async",
                                          "cuMemAllocAsync", "cuStreamSynchronize", "cuMemcpyDtoH")}
    with s.capture() as g:
        o.copy_from(a, stream=s)
        with pytest.raises(bc.CudaStreamCaptureError) as info:
            fn(a, s, o)
        b.copy_from(o, stream=s)
    assert info.value.call == call and info.value.code == 900
    assert "capture goes on" in str(info.value)
    assert counts["cuMemcpyDtoDAsync"] + 2 == fake.calls("cuMemcpyDtoDAsync")
    del counts["cuMemcpyDtoDAsync"]
    assert {c: fake.calls(c) for c in counts} == counts   # nothing else reached the driver
    assert [x.kind for x in g.nodes()] == ["memcpy", "memcpy"]
    g.instantiate().launch(s)
    s.synchronize()
    assert read(b.ptr, 256) == bytes(range(256))


@pytest.mark.parametrize("name, call, fn", ENTRY_POINTS[:6], ids=[e[0] for e in ENTRY_POINTS[:6]])
def test_uncaught_refusal_discards_the_capture_and_leaves_the_stream_usable(fake, da, name, call, fn):
    s = bc.Stream()
    a, o = bc.alloc(256, stream=s, allocator=da), bc.alloc(256, stream=s, allocator=da)
    with pytest.raises(bc.CudaStreamCaptureError, match=call):
        with s.capture():
            fn(a, s, o)
    assert not bc.is_capturing(s)
    write(a.ptr, bytes(range(256)))
    o.copy_from(np.frombuffer(read(a.ptr, 256), np.uint8), stream=s)   # eager: pageable is fine now
    s.synchronize()
    assert read(o.ptr, 256) == bytes(range(256))


def test_copies_outside_a_capture_are_not_refused_while_one_runs(fake, da):
    """Only the capturing stream refuses: a pageable copy on another stream during a
    (relaxed) capture runs."""
    s, other = bc.Stream(), bc.Stream()
    a = bc.alloc(256, stream=other, allocator=da)
    with s.capture(mode="relaxed") as g:
        a.copy_from(np.arange(256, dtype=np.uint8), stream=other)
        got = a.to_numpy(stream=other)
    assert g.num_nodes() == 0
    assert bytes(got) == bytes(range(256))


# ----------------------------------------- property test: no early free, no leak
COPY_OPS = st.lists(st.one_of(
    st.tuples(st.just("dev"), st.integers(0, 1)),
    st.tuples(st.just("pinned")),
    st.tuples(st.just("capture"), st.lists(st.tuples(st.sampled_from(["d2d", "h2d", "d2h", "memset"]),
                                                     st.integers(0, 31), st.integers(0, 31)),
                                           min_size=1, max_size=4), st.integers(0, 1)),
    st.tuples(st.just("launch"), st.integers(0, 31), st.integers(0, 1)),
    st.tuples(st.just("drop_dev"), st.integers(0, 31)),
    st.tuples(st.just("close_dev"), st.integers(0, 31)),
    st.tuples(st.just("drop_pinned"), st.integers(0, 31)),
    st.tuples(st.just("close_pinned"), st.integers(0, 31)),
    st.tuples(st.just("drop_exec"), st.integers(0, 31)),
    st.tuples(st.just("gc")),
), max_size=40)


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(ops=COPY_OPS)
def test_random_captured_copy_lifetimes_never_free_early_nor_leak(fake, ops):
    """Random captures of copies and memsets over buffers that are then dropped or
    closed in any order: every launch finds its memory (the double fails one that
    touches freed device memory or host memory no longer page-locked) and the bytes
    each executable copies are the ones its capture saw; at the end nothing is left."""
    da = bc.DriverAllocator(0)
    settle()
    g0 = fake.live("mem"), fake.live("host_mem")
    streams = [bc.Stream(), bc.Stream()]
    devs, pins, execs = [], [], []       # execs: (exe, [(weakref to a destination, its bytes after a launch)])
    tag = 0
    for op in ops:
        if op[0] == "dev":
            tag += 1
            b = bc.alloc(64, stream=streams[op[1]], allocator=da)
            write(b.ptr, bytes([tag]) * 64)
            devs.append(b)
        elif op[0] == "pinned":
            tag += 1
            p = bc.PinnedBuffer(64)
            memoryview(p)[:] = bytes([tag]) * 64
            pins.append(p)
        elif op[0] == "capture" and devs and pins:
            # Sources are the surviving devs/pins (never written again); destinations
            # are this capture's own scratch and sink, dropped at once (the graph holds them).
            s = streams[op[2]]
            scratch, sink = bc.alloc(64, stream=s, allocator=da), bc.PinnedBuffer(64)
            want_scratch = want_sink = None
            with s.capture() as g:
                for kind, i, j in op[1]:
                    d, p = devs[i % len(devs)], pins[j % len(pins)]
                    if kind == "d2d":
                        scratch.copy_from(d, stream=s)
                        want_scratch = read(d.ptr, 64)
                    elif kind == "h2d":
                        scratch.copy_from(p, stream=s)
                        want_scratch = bytes(p)
                    elif kind == "d2h":
                        d.copy_to(sink, stream=s)
                        want_sink = read(d.ptr, 64)
                    else:
                        scratch.memset(i, stream=s)
                        want_scratch = bytes([i]) * 64
            checks = [(weakref.ref(x), w) for x, w in ((scratch, want_scratch), (sink, want_sink)) if w is not None]
            execs.append((g.instantiate(), checks))
            del g, scratch, sink, d, p
        elif op[0] == "launch" and execs:
            exe, checks = execs[op[1] % len(execs)]
            s = streams[op[2]]
            exe.launch(s)                                # fails on freed memory
            s.synchronize()
            for ref, want in checks:
                dst = ref()
                assert dst is not None                   # held by the executable
                got = bytes(dst) if type(dst) is bc.PinnedBuffer else read(dst.ptr, 64)
                assert got == want, op
            del dst
        elif op[0] in ("drop_dev", "close_dev") and devs:
            b = devs.pop(op[1] % len(devs))
            if op[0] == "close_dev":
                b.close()
            del b
        elif op[0] in ("drop_pinned", "close_pinned") and pins:
            p = pins.pop(op[1] % len(pins))
            if op[0] == "close_pinned":
                p.close()
            del p
        elif op[0] == "drop_exec" and execs:
            execs.pop(op[1] % len(execs))
        elif op[0] == "gc":
            gc.collect()
    devs = pins = execs = exe = checks = s = b = p = None
    settle()
    assert (fake.live("mem"), fake.live("host_mem")) == g0


# ------------------------------ DriverAllocator (BARECUDA_ALLOCATOR=driver) in a capture
@pytest.fixture
def plain_alloc(fake):
    """A DriverAllocator on plain cuMemAlloc, as where the driver has no memory pools:
    its first cuMemAllocAsync answers CUDA_ERROR_NOT_SUPPORTED."""
    al = bc.DriverAllocator(0)
    fake.fail("cuMemAllocAsync", 801)
    b = bc.alloc(16, allocator=al)
    assert fake.calls("cuMemAlloc") >= 1
    del b
    return al


@pytest.mark.parametrize("kind", ["driver", "driver_pool"])
def test_driver_allocations_on_the_capturing_stream_are_graph_memory(fake, vadd, kind):
    """cuMemAllocAsync (cuMemAllocFromPoolAsync) on the capturing stream is a graph
    allocation node: the capture does not hold the buffer, so dropping it in the
    capture makes a free node and the executable can be relaunched."""
    da = bc.DriverAllocator(0) if kind == "driver" else bc.DriverMemoryPool(0)
    s = bc.Stream()
    a = bc.alloc(64, stream=s, allocator=da)
    write(a.ptr, bytes(range(64)))
    with s.capture() as g:
        t = bc.alloc(64, stream=s, allocator=da)
        t.copy_from(a, stream=s)
        vadd.launch(1, 16, t, t, t, 16, stream=s)
        a.copy_from(t, stream=s)
        ref = weakref.ref(t)
        del t
        assert ref() is None                             # not held: freed in the graph
    assert [x.kind for x in g.nodes()] == ["mem_alloc", "memcpy", "kernel", "memcpy", "mem_free"]
    exe = g.instantiate()
    for _ in range(2):
        exe.launch(s)
        s.synchronize()


def test_driver_frees_during_a_capture_wait_for_its_end(fake, da, plain_alloc):
    """Buffers dropped while a capture runs -- on the capturing stream, on the legacy
    stream, from cuMemAlloc -- are not freed inside it (cuMemFreeAsync of memory that
    is not a graph allocation, cuMemFree and context synchronizations would fail or
    invalidate the capture): they are freed when the capture ends."""
    s = bc.Stream()
    settle()
    m0 = fake.live("mem")
    bufs = [bc.alloc(64, stream=s, allocator=da), bc.alloc(64, allocator=da),
            bc.alloc(64, allocator=plain_alloc), bc.alloc(64, stream=s, allocator=plain_alloc)]
    used = bc.alloc(64, stream=bc.Stream(), allocator=da)
    used.copy_from(bufs[0], stream=s)                    # used elsewhere: its free syncs the context
    bufs.append(used)
    del used
    frees = fake.calls("cuMemFreeAsync"), fake.calls("cuMemFree"), fake.calls("cuCtxSynchronize")
    with s.capture(mode="global") as g:
        del bufs                                         # no warning (pytest makes them errors)
        gc.collect()
        assert fake.live("mem") == m0 + 5
        assert (fake.calls("cuMemFreeAsync"), fake.calls("cuMemFree"), fake.calls("cuCtxSynchronize")) == frees
    assert g.num_nodes() == 0                            # and the capture stayed valid
    assert fake.live("mem") == m0                        # freed at its end
    assert fake.calls("cuCtxSynchronize") == frees[2] + 1


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_cuMemAlloc_in_a_strict_capture_is_refused(fake, plain_alloc, mode):
    s = bc.Stream()
    with pytest.raises(bc.CudaStreamCaptureError, match="relaxed") as info:
        with s.capture(mode=mode):
            bc.alloc(64, stream=s, allocator=plain_alloc)
    assert info.value.call == "cuMemAlloc"
    assert not bc.is_capturing(s)
    bc.alloc(64, stream=s, allocator=plain_alloc).memset(1, stream=s)   # usable again
    s.synchronize()


def test_cuMemAlloc_in_a_relaxed_capture_lives_as_long_as_the_graph(fake, da, plain_alloc, vadd):
    """cuMemAlloc in a relaxed capture is ordinary memory, not a graph node: the graph
    holds it through the work that uses it, so an executable relaunched after the
    caller dropped (or closed) it still finds it, and it is freed with the last of
    the graph and its executables."""
    s = bc.Stream()
    settle()
    m0 = fake.live("mem")
    a = bc.alloc(64, stream=s, allocator=da)
    write(a.ptr, bytes(range(64)))
    with s.capture(mode="relaxed") as g:
        t = bc.alloc(64, stream=s, allocator=plain_alloc)
        u = bc.alloc(64, stream=s, allocator=plain_alloc)
        t.copy_from(a, stream=s)
        vadd.launch(1, 16, u, t, t, 16, stream=s)
        u.memset(7, stream=s)
        a.copy_from(t, stream=s)
        refs = [weakref.ref(t), weakref.ref(u)]
        u.close()
        del t, u
    assert [x.kind for x in g.nodes()] == ["memcpy", "kernel", "memset", "memcpy"]
    gc.collect()
    assert all(r() is not None for r in refs)
    exe = g.instantiate()
    del g
    gc.collect()
    for _ in range(3):
        write(a.ptr, bytes(range(64)))
        exe.launch(s)                                    # fails on freed memory
        s.synchronize()
        assert read(a.ptr, 64) == bytes(range(64))
    assert fake.live("mem") == m0 + 3
    del exe
    settle()
    assert all(r() is None for r in refs)
    assert fake.live("mem") == m0 + 1
