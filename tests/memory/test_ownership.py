"""Every dependant holds the allocation owner (issue 9, item 1), on the driver double.

close() on an owner with live dependants defers the free to the last of them
(docs/errors.md, "Ownership"): views, slices, plans, DLPack exports, IPC exports,
and graph nodes and executables (kernel, memset and memcpy nodes, keep_alive, set_arg
on a node or an executable's node handle). A dependant made through a view holds the
owner even after that view was closed. Nothing is freed early, nothing leaks.
Also here: imports of our own memory described by address only (a CAI dict built by
hand, another library's DLPack capsule or CAI wrapper of our buffer) pin the owner."""
import gc

import pytest

import barecuda as bc
from barecuda import ipc
from _helpers import IMPORTS, ForeignArray, cai_dict as _cai_dict, live_mem_after_gc as _mem_after_gc

np = pytest.importorskip("numpy")


def _gone(fake, live):
    gc.collect()
    return fake.live("mem") == live


# ------------------------------------------- dependants made through a view
DEPENDANTS = {
    "plan": lambda k, v: k.bind(1, 32, v, v, v, 1),
    "plan_set_arg": lambda k, v: _set_arg_plan(k, v),
    "dlpack": lambda k, v: v.__dlpack__(stream=-1),
    "slice_of_view": lambda k, v: v[0:8],
    "graph_kernel": lambda k, v: _graph_with(lambda g: g.add_kernel(k, 1, 32, v, v, v, 1)),
    "graph_memset": lambda k, v: _graph_with(lambda g: g.add_memset(v, 0)),
    "graph_keep_alive": lambda k, v: _graph_with(lambda g: g.keep_alive(v)),
}


def _set_arg_plan(k, v):
    p = k.bind(1, 32, 0, 0, 0, 1)
    p.set_arg(0, v)
    return p


def _graph_with(add):
    g = bc.Graph()
    add(g)
    return g


@pytest.mark.parametrize("kind", sorted(DEPENDANTS))
def test_dependant_made_through_a_view_holds_the_owner(fake, vadd, kind):
    """The view is closed first, then the owner: the dependant still holds the memory,
    and its release frees it (the pin is on the owner, not on the closed view)."""
    live = fake.live("mem")
    b = bc.DriverAllocator(0).alloc(4096)
    v = b.view("float32")
    dep = DEPENDANTS[kind](vadd, v)
    v.close()
    b.close()
    assert not _gone(fake, live), "freed while a dependant holds it"
    del dep
    assert _gone(fake, live), "leaked: the dependant's pin was never released"


# ---------------------------------------------------------------- graphs
def test_graph_kernel_node_defers_the_owners_free(fake, vadd):
    live = fake.live("mem")
    a = bc.DriverAllocator(0).alloc(4096)
    g = bc.Graph()
    g.add_kernel(vadd, 1, 32, a, a, a, 1)
    exe = g.instantiate()
    a.close()
    assert not _gone(fake, live)
    exe.launch()                                    # the address is still allocated
    del g
    assert not _gone(fake, live)                    # the executable's snapshot holds it
    exe.close()
    del exe
    assert _gone(fake, live)


def _kernel_node_set_arg(k, a, b):
    g = bc.Graph()
    n = g.add_kernel(k, 1, 32, a, a, a, 1)
    n.set_arg(1, b)                                 # the node now refers to b too
    return g, n


GRAPH_USES_BOTH = {
    "memcpy_node": lambda k, a, b: (_graph_with(lambda g: g.add_memcpy(a, b)),),
    "kernel_node_set_arg": _kernel_node_set_arg,
}


@pytest.mark.parametrize("release", ["close", "del"])
@pytest.mark.parametrize("kind", sorted(GRAPH_USES_BOTH))
def test_graph_holds_both_buffers(fake, vadd, kind, release):
    """A graph whose nodes use a and b (a memcpy node; a kernel node whose set_arg
    brought b in): closing both frees neither while the graph (and its node objects)
    live; closing or dropping the graph frees both."""
    live = fake.live("mem")
    a, b = bc.DriverAllocator(0).alloc(4096), bc.DriverAllocator(0).alloc(4096)
    held = GRAPH_USES_BOTH[kind](vadd, a, b)
    b.close()
    assert fake.live("mem") == live + 2, "b freed while the graph uses it"
    a.close()
    assert fake.live("mem") == live + 2, "freed while the graph uses it"
    if release == "close":
        held[0].close()
    del held
    assert _gone(fake, live)


def test_exec_node_handle_set_arg_holds_the_new_value(fake, vadd):
    live = fake.live("mem")
    a, b = bc.DriverAllocator(0).alloc(4096), bc.DriverAllocator(0).alloc(4096)
    g = bc.Graph()
    n = g.add_kernel(vadd, 1, 32, a, a, a, 1)
    exe = g.instantiate()
    h = exe.kernel_node(n)
    h.set_arg(0, b)
    b.close()
    exe.launch()
    assert not _gone(fake, live)
    h.set_arg(0, a)                                 # b's pin goes with the old value
    a.close()
    del h
    exe.close()
    del exe, n, g
    assert _gone(fake, live)


def test_graph_refuses_a_closed_buffer(fake, vadd):
    a = bc.alloc(4096)
    a.close()
    g = bc.Graph()
    with pytest.raises(ValueError, match="closed"):
        g.add_kernel(vadd, 1, 32, a, a, a, 1)
    with pytest.raises(ValueError, match="closed"):
        g.add_memset(a, 0)


# ------------------------------------------------------------------- IPC
def test_ipc_export_of_a_view_holds_the_owner(fake):
    live = fake.live("mem")
    buf = bc.ipc.IpcAllocator(0).alloc(64)
    v = buf.view("uint8")
    h = ipc.export_buffer(v)
    v.close()
    buf.close()
    assert not _gone(fake, live)
    h.release()
    assert _gone(fake, live)


# ------------------------------------------------ pinned memory under its copy
@pytest.mark.parametrize("call", ["cuEventCreate", "cuEventRecord", "cuStreamWaitEvent"])
def test_failed_guard_event_waits_for_the_copy_before_raising(fake, call):
    """Issue 9 item 10: when the event that guards a pinned buffer's async copy cannot
    be created, recorded or chained, the copy's stream is waited for before the error
    is raised, so a later close() cannot free the memory under the copy."""
    p = bc.PinnedBuffer(64)
    s = bc.Stream()
    b = bc.alloc(64, stream=s)
    if call == "cuStreamWaitEvent":
        b.copy_from(p, stream=s)                    # the guard event exists ...
        fake.fail("cuEventQuery", 600)              # ... and still covers that copy
    fake.fail(call, 1)                              # CUDA_ERROR_INVALID_VALUE
    syncs = fake.calls("cuStreamSynchronize")
    with pytest.raises(bc.CudaError, match=call):
        b.copy_from(p, stream=s)
    assert fake.calls("cuStreamSynchronize") == syncs + 1, "raised without waiting for the copy"
    p.close()
    b.close()


# ================================================== every dependant defers the owner's free
ALLOCATORS = {"driver": bc.DriverAllocator, "driver_pool": bc.DriverMemoryPool, "cache": bc.MemoryPool}


def test_view_write_after_owner_close_does_not_reach_a_new_allocation(fake):
    """The issue's snippet: the view's memory stays allocated (a new buffer cannot get
    it), so the write through the view lands in it and q keeps its contents."""
    live = fake.live("mem")
    p = bc.to_device(np.zeros(256, np.float32)); v = p.view("float32"); p.close()
    q = bc.to_device(np.arange(256, dtype=np.float32))
    assert q.ptr != v.ptr and fake.live("mem") == live + 2        # p's memory is still held by v
    v.copy_from(np.full(256, -1, np.float32))
    np.testing.assert_array_equal(q.to_numpy()[:4], [0, 1, 2, 3])
    np.testing.assert_array_equal(v.to_numpy(), np.full(256, -1, np.float32))
    del v
    assert _mem_after_gc(fake) == live + 1                         # the last dependant frees it


def test_plan_launch_after_its_argument_was_closed(fake, vadd):
    """`plan = k.bind(1, 32, o, a, a, 256); a.close(); plan()`: the plan holds a, so it
    launches with memory that is still allocated, and freeing waits for the plan."""
    live = fake.live("mem")
    o = bc.alloc(1024)
    a = bc.to_device(np.arange(256, dtype=np.float32))
    aptr = a.ptr
    plan = vadd.bind(1, 32, o, a, a, 256)
    a.close()
    assert a.is_closed and fake.live("mem") == live + 2
    plan()
    assert fake.last_launch().params[8:16] == aptr.to_bytes(8, "little")
    assert bc.to_device(np.zeros(256, np.float32)).ptr != aptr     # not handed out again
    del plan
    assert _mem_after_gc(fake) == live + 1


@pytest.mark.parametrize("how", sorted(IMPORTS))
def test_every_dependant_defers_the_owners_free(fake, how):
    """close() with live dependants defers the free (the one documented behaviour), for
    views, slices, re-imports and imports of our memory described by address."""
    live = fake.live("mem")
    b = bc.DriverAllocator(0).alloc(4096)
    d = IMPORTS[how](b)
    assert d.owner is b
    b.close()
    assert _mem_after_gc(fake) == live + 1, "freed while a dependant holds it"
    d.memset(0)                                    # the dependant stays usable
    del d
    assert _mem_after_gc(fake) == live, "leaked"


# ================================================== use on another stream through a dependant
@pytest.mark.parametrize("kind", sorted(ALLOCATORS))
@pytest.mark.parametrize("how", sorted(IMPORTS) + ["raw"])
def test_use_on_another_stream_through_a_dependant(fake, vadd, pending, kind, how):
    """`b = pool.alloc(4096, stream=s1); v = b.view(...); k.launch(..., v, stream=s2);
    del v; b.close(); c = pool.alloc(4096, stream=s1)`: c never gets memory the launch
    on s2 still uses, and no free happens under it, whatever the dependant."""
    early = pending.fakecuda_early_frees()
    pool = ALLOCATORS[kind](0)
    s1, s2 = bc.Stream(), bc.Stream()
    b = pool.alloc(4096, stream=s1)
    if how == "raw":
        vadd.launch(1, 32, b.ptr, b.ptr, b.ptr, 1, stream=s2)
        s2.synchronize()                  # what docs/errors.md asks of a raw address's user
    else:
        v = IMPORTS[how](b)
        vadd.launch(1, 32, v, v, v, 1, stream=s2)
        del v
    b.close()
    gc.collect()
    c = pool.alloc(4096, stream=s1)
    assert pending.fakecuda_pending_refs(c.ptr, s1.handle_int, 0) <= 0, "c got memory s2's work still uses"
    del c
    gc.collect()
    assert pending.fakecuda_early_frees() == early, "freed under s2's pending launch"
    s2.synchronize()
    if hasattr(pool, "trim"):
        pool.trim()


def test_by_address_import_marks_the_owner(fake, vadd):
    """note_use through an import resolved by address marks the owner: the plain
    allocator's free then waits for the context."""
    b = bc.DriverAllocator(0).alloc(256)
    s = bc.Stream()
    vadd.launch(1, 32, _cai_dict(b), 0, 0, 1, stream=s)     # a temporary import
    before = fake.calls("cuCtxSynchronize")
    b.close()
    assert fake.calls("cuCtxSynchronize") == before + 1


# ============================================== imports of our memory, by address
def test_by_address_import_of_a_closed_owner_still_held_by_a_view(fake):
    """The owner is closed but its free waits for a view: a wrapper of that view's
    memory imported now pins the same allocation (its memory is alive)."""
    live = fake.live("mem")
    b = bc.DriverAllocator(0).alloc(4096)
    v = b.view("float32")
    b.close()
    w = bc.as_device_buffer(ForeignArray(v.ptr, 1024))
    assert w.owner is b
    del v
    assert _mem_after_gc(fake) == live + 1                     # w still holds it
    w.memset(0)
    del w
    assert _mem_after_gc(fake) == live


def test_by_address_import_past_the_end_of_our_allocation_is_refused(fake):
    b = bc.alloc(1024)
    n = fake.calls("cuMemsetD8Async")
    with pytest.raises(BufferError, match="runs past the end"):
        bc.as_device_buffer({"data": (b.ptr + 16, False), "shape": (256,), "typestr": "<f4", "version": 3})
    with pytest.raises(BufferError, match="runs past the end"):
        bc.DeviceBuffer.from_dlpack(ForeignArray(b.ptr, 256, offset=4))
    bc.as_device_buffer({"data": (b.ptr + 16, False), "shape": (252,), "typestr": "<f4", "version": 3}).memset(0)
    assert fake.calls("cuMemsetD8Async") == n + 1


def test_by_address_import_after_the_owner_was_freed_is_foreign(fake):
    """Once the owner's memory is gone the address belongs to no buffer of ours: an
    import of it is a plain foreign view (the registry forgets freed memory)."""
    b = bc.DriverAllocator(0).alloc(4096)
    p = b.ptr
    b.close()
    v = bc.as_device_buffer({"data": (p, False), "shape": (1024,), "typestr": "<f4", "version": 3})
    assert type(v.owner) is dict


@pytest.mark.parametrize("how", ["init", "pool", "managed", "pitched", "to_device"])
def test_every_owner_kind_is_found_by_address(fake, how):
    if how == "pitched":
        b = bc.alloc_pitch(64, 4)[0]
    else:
        b = {"init": lambda: bc.DeviceBuffer(4096), "pool": lambda: bc.MemoryPool(0).alloc(4096),
             "managed": lambda: bc.managed_empty(4096), "to_device": lambda: bc.to_device(bytes(4096))}[how]()
    assert _cai_dict(b).owner is b


def test_many_live_owners_are_found_and_forgotten(fake):
    bufs = [bc.alloc(512 + 16 * i) for i in range(300)]
    for i in (0, 1, 150, 298, 299):
        assert bc.as_device_buffer(ForeignArray(bufs[i].ptr + 64, 16)).owner is bufs[i]
    for b in bufs[::2]:
        b.close()
    for i in (1, 151, 299):
        assert bc.as_device_buffer(ForeignArray(bufs[i].ptr, 16)).owner is bufs[i]
    assert type(bc.as_device_buffer(ForeignArray(0x10, 4)).owner) is not bc.DeviceBuffer
