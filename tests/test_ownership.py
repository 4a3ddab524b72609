"""Every dependant holds the allocation owner (issue 9, item 1), on the driver double.

close() on an owner with live dependants defers the free to the last of them
(docs/errors.md, "Ownership"): views, slices, plans, DLPack exports, IPC exports,
and graph nodes and executables (kernel, memset and memcpy nodes, keep_alive, set_arg
on a node or an executable's node handle). A dependant made through a view holds the
owner even after that view was closed. Nothing is freed early, nothing leaks."""
import gc

import pytest

import barecuda as bc
from barecuda import ipc


@pytest.fixture
def vadd(fake, ptx):
    return bc.Module.from_ptx(ptx.VADD).get_kernel("vadd")


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
    buf = bc.IpcAllocator(0).alloc(64)
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
