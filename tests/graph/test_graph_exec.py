"""Executable graphs against the fake driver: kernel-node handles and set_arg (packed
and refused exactly as an eager launch), batched argument updates (ArgUpdate), whole-graph
update, enable/disable, instantiate flags and upload, node priority, closed objects.
"""
import gc
import struct
import tracemalloc
import weakref

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import barecuda as bc
from _helpers import vadd_block


# -------------------------------------------------------------- executables
def test_exec_kernel_node_set_arg_changes_only_that_executable(fake, vadd, stream):
    a, b, o, o2 = (bc.alloc(64) for _ in range(4))
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, o, a, b, 16)
    e1, e2 = g.instantiate(), g.instantiate()
    h = e1.kernel_node(node)
    h.set_arg(3, 5)
    h.set_arg(0, o2)
    assert h.args == (o2, a, b, 5)
    e1.launch(stream)
    assert fake.last_launch().params == vadd_block(o2.ptr, a.ptr, b.ptr, 5)
    e2.launch(stream)
    assert fake.last_launch().params == vadd_block(o.ptr, a.ptr, b.ptr, 16)
    g.instantiate().launch(stream)
    assert fake.last_launch().params == vadd_block(o.ptr, a.ptr, b.ptr, 16)


def test_set_arg_checks_like_launch_and_leaves_the_node_unchanged(fake, vadd, stream):
    a, o = bc.alloc(64), bc.alloc(64)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, o, a, a, 3)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    before = fake.calls("cuGraphExecKernelNodeSetParams")
    with pytest.raises(OverflowError):
        h.set_arg(3, 2 ** 32)
    with pytest.raises(TypeError):
        h.set_arg(3, "x")
    with pytest.raises(TypeError):
        h.set_arg(0, 1.5)
    with pytest.raises(IndexError):
        h.set_arg(4, 1)
    with pytest.raises(IndexError):
        h.set_arg(-1, 1)
    assert fake.calls("cuGraphExecKernelNodeSetParams") == before
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(o.ptr, a.ptr, a.ptr, 3)


def test_set_arg_driver_failure_restores_the_slot(fake, vadd, stream):
    a = bc.alloc(64)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, a, a, a, 3)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    fake.fail("cuGraphExecKernelNodeSetParams", 1)
    with pytest.raises(bc.CudaInvalidValueError):
        h.set_arg(3, 99)
    assert h.args[3] == 3
    h.set_arg(2, a)                 # pushes the whole block: slot 3 must still be 3
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(a.ptr, a.ptr, a.ptr, 3)


SCALAR_VALUES = [0, 1, -1, 2, 127, 128, 255, 256, -128, -129, 32767, 65535, 65536, -32769, 2**31 - 1, 2**31,
                 2**32 - 1, 2**32, -2**31 - 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63, -2**63 - 1,
                 0.0, -2.5, 1e300, float("inf"), True, False, None, "x", b"\x01\x02", 3 + 0j]


@pytest.mark.parametrize("value", SCALAR_VALUES, ids=repr)
def test_set_arg_packs_and_refuses_exactly_as_an_eager_launch(fake, ptx, stream, value):
    """Every slot type of a kernel, every kind of value: set_arg's fast path and its
    fallbacks give the executable the bytes an eager launch gives the kernel, and
    refuse what a launch refuses (same exception type, executable unchanged)."""
    k = bc.Module.from_ptx(ptx.ALL_SCALARS).get_kernel("scalars")
    base = [1] * len(ptx.ALL_SCALARS_TYPES)
    g = bc.Graph()
    node = g.add_kernel(k, 1, 1, *base)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    for i in range(len(base)):
        args = list(base)
        args[i] = value
        try:
            k.launch(1, 1, *args, stream=stream)
        except Exception as e:     # noqa: BLE001 -- the reference behaviour
            expected = type(e)
        else:
            expected = fake.last_launch().params
        calls = fake.calls("cuGraphExecKernelNodeSetParams")
        try:
            h.set_arg(i, value)
        except Exception as e:     # noqa: BLE001
            assert type(e) is expected, (i, value, e)
            assert fake.calls("cuGraphExecKernelNodeSetParams") == calls
            exe.launch(stream)
            k.launch(1, 1, *base, stream=stream)
            ref = fake.last_launch().params
            exe.launch(stream)
            assert fake.last_launch().params == ref, (i, value)
        else:
            exe.launch(stream)
            assert fake.last_launch().params == expected, (i, value)
            assert h.args[i] is value
            h.set_arg(i, 1)


def test_set_arg_buffers_views_and_closed_buffers(fake, vadd, stream):
    a, o = bc.alloc(64), bc.alloc(64)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, o, a, a, 3)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    view = a[16:]
    h.set_arg(1, view)
    h.set_arg(2, a.ptr + 8)                    # an int address
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(o.ptr, view.ptr, a.ptr + 8, 3)
    dead = bc.alloc(64)
    dead.close()
    with pytest.raises(ValueError, match="closed"):
        h.set_arg(0, dead)
    with pytest.raises(TypeError):
        h.set_arg(3, a)                        # a buffer in the u32 slot
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(o.ptr, view.ptr, a.ptr + 8, 3)
    mod = vadd.module
    mod.close()
    with pytest.raises(ValueError, match="closed"):
        h.set_arg(3, 1)
    exe.close()
    with pytest.raises(ValueError, match="closed"):
        h.set_arg(3, 1)


def test_handles_share_parameters_the_executable_holds_the_values(fake, vadd, stream):
    """What set_arg put in an executable lives as long as the executable, not the
    handle; a new handle on the node starts from what the executable runs."""
    a, o = bc.alloc(64), bc.alloc(64)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, o, a, a, 3)
    exe = g.instantiate()
    h1 = exe.kernel_node(node)
    new = bc.alloc(64)
    ptr, ref = new.ptr, weakref.ref(new)
    h1.set_arg(0, new)
    h1.set_arg(3, 9)
    del h1, new
    gc.collect()
    assert ref() is not None                   # the executable still runs it
    h2 = exe.kernel_node(node)
    h3 = exe.kernel_node(node)
    assert h2.args == (ref(), a, a, 9)
    h2.set_arg(3, 5)
    assert h3.args[3] == 5                     # one parameter block per node and executable
    h3.set_arg(2, o)
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(ptr, a.ptr, o.ptr, 5)
    del h2, h3, exe
    gc.collect()
    assert ref() is None


def test_kernel_node_after_an_update_starts_from_the_update(fake, vadd, stream):
    a, o = bc.alloc(64), bc.alloc(64)
    g1 = bc.Graph()
    n1 = g1.add_kernel(vadd, 1, 16, o, o, o, 1)
    exe = g1.instantiate()
    g2 = bc.Graph()
    g2.add_kernel(vadd, 1, 16, a, a, a, 2)
    exe.update(g2)
    h = exe.kernel_node(n1)
    assert h.args == (a, a, a, 2)
    h.set_arg(3, 7)                             # pushes the whole block: the update's pointers stay
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(a.ptr, a.ptr, a.ptr, 7)


def test_set_args_and_set_dims(fake, vadd, stream):
    a, o = bc.alloc(64), bc.alloc(64)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, o, a, a, 3)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    h.set_args(a, o, o, 8)
    h.set_dims(grid=(4, 2), block=64)
    exe.launch(stream)
    rec = fake.last_launch()
    assert rec.params == vadd_block(a.ptr, o.ptr, o.ptr, 8)
    assert rec.grid == (4, 2, 1) and rec.block == (64, 1, 1)
    with pytest.raises(ValueError):
        h.set_dims(block=4096)
    with pytest.raises(TypeError):
        h.set_args(1, 2)
    with pytest.raises(OverflowError):
        h.set_args(a, o, o, 2**32)   # PTX .u32 takes [-2**31, 2**32-1] (issue 10)
    exe.launch(stream)
    rec = fake.last_launch()
    assert rec.params == vadd_block(a.ptr, o.ptr, o.ptr, 8) and rec.block == (64, 1, 1)


def test_kernel_node_of_another_graph_is_refused(fake, vadd):
    g1, g2 = bc.Graph(), bc.Graph()
    n2 = g2.add_kernel(vadd, 1, 1, 0, 0, 0, 0)
    g1.add_kernel(vadd, 1, 1, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="another graph"):
        g1.instantiate().kernel_node(n2)


# ------------------------------------------- batched argument updates (ArgUpdate)
def _chain(vadd, bufs, n=3):
    """n vadd nodes in a chain (the double replays them in order), each on bufs."""
    g = bc.Graph()
    prev, nodes = None, []
    o, a, b = bufs
    for i in range(n):
        prev = g.add_kernel(vadd, 1, 16, o, a, b, 10 + i, depends_on=prev)
        nodes.append(prev)
    return g, nodes


def _node_blocks(fake, exe, stream, n=3):
    """The parameter block of each node as the double runs the executable."""
    exe.launch(stream)
    return [fake.last_launch(n - 1 - i).params for i in range(n)]


def test_arg_update_sets_every_slot_with_one_push_per_node(fake, vadd, stream):
    o, a, b, o2, a2 = (bc.alloc(64) for _ in range(5))
    g, nodes = _chain(vadd, (o, a, b))
    exe = g.instantiate()
    h0, h1 = exe.kernel_node(nodes[0]), exe.kernel_node(nodes[1])
    upd = exe.prepare_args([(h0, 3), (h1, 0), (h0, 0), (nodes[2], 3), (nodes[2], 1)])
    assert len(upd) == 5 and upd.exec is exe
    assert [(h.node.index, i) for h, i in upd.slots] == [(0, 3), (1, 0), (0, 0), (2, 3), (2, 1)]
    before = fake.calls("cuGraphExecKernelNodeSetParams")
    upd.set(5, o2, a2, 2**32 - 1, a2)
    assert fake.calls("cuGraphExecKernelNodeSetParams") == before + 3        # nodes, not slots
    assert _node_blocks(fake, exe, stream) == [vadd_block(a2.ptr, a.ptr, b.ptr, 5),
                                               vadd_block(o2.ptr, a.ptr, b.ptr, 11),
                                               vadd_block(o.ptr, a2.ptr, b.ptr, 2**32 - 1)]
    assert h0.args == (a2, a, b, 5) and h1.args == (o2, a, b, 11)
    assert exe.kernel_node(nodes[2]).args == (o, a2, b, 2**32 - 1)
    h1.set_arg(3, 7)                         # handles and the update share the block
    upd.set(6, o, o, 1, a)
    assert _node_blocks(fake, exe, stream) == [vadd_block(o.ptr, a.ptr, b.ptr, 6),
                                               vadd_block(o.ptr, a.ptr, b.ptr, 7),
                                               vadd_block(o.ptr, a.ptr, b.ptr, 1)]
    g.instantiate().launch(stream)           # the graph itself is unchanged
    assert fake.last_launch(0).params == vadd_block(o.ptr, a.ptr, b.ptr, 12)


def test_arg_update_refuses_bad_values_before_the_driver(fake, vadd, stream):
    o, a, b = (bc.alloc(64) for _ in range(3))
    g, nodes = _chain(vadd, (o, a, b))
    exe = g.instantiate()
    upd = exe.prepare_args([(nodes[0], 3), (nodes[1], 0), (nodes[2], 3)])
    ref = _node_blocks(fake, exe, stream)
    dead = bc.alloc(64)
    dead.close()
    before = fake.calls("cuGraphExecKernelNodeSetParams")
    for values, exc in [((1, a, 2**32), OverflowError), ((1, a, "x"), TypeError), ((1, 3.5, 1), TypeError),
                        ((1, dead, 1), ValueError), ((-2**31 - 1, a, 1), OverflowError), ((1, a), TypeError),
                        ((1, a, 1, 1), TypeError)]:
        with pytest.raises(exc):
            upd.set(*values)
        assert fake.calls("cuGraphExecKernelNodeSetParams") == before, values
        assert _node_blocks(fake, exe, stream) == ref, values
        assert exe.kernel_node(nodes[0]).args[3] == 10 and exe.kernel_node(nodes[1]).args[0] is o
    vadd.module.close()
    with pytest.raises(ValueError, match="closed"):
        upd.set(1, a, 1)
    exe.close()
    with pytest.raises(ValueError, match="closed"):
        upd.set(1, a, 1)
    assert fake.calls("cuGraphExecKernelNodeSetParams") == before


def test_arg_update_driver_failure_keeps_pushed_nodes_and_restores_the_rest(fake, vadd, stream):
    o, a, b, n1 = (bc.alloc(64) for _ in range(4))
    g, nodes = _chain(vadd, (o, a, b))
    exe = g.instantiate()
    upd = exe.prepare_args([(nodes[0], 3), (nodes[1], 0), (nodes[1], 3), (nodes[2], 3)])
    ref = weakref.ref(n1)
    fake.fail("cuGraphExecKernelNodeSetParams", 1, after=1)      # the second node's push fails
    with pytest.raises(bc.CudaInvalidValueError, match="node #1"):
        upd.set(20, n1, 21, 22)
    h0, h1, h2 = (exe.kernel_node(n) for n in nodes)
    assert h0.args[3] == 20 and h1.args == (o, a, b, 11) and h2.args[3] == 12
    del n1
    gc.collect()
    assert ref() is None                     # not held: the executable never got it
    h1.set_arg(1, b)                         # pushes node 1's whole block: the old values
    assert _node_blocks(fake, exe, stream) == [vadd_block(o.ptr, a.ptr, b.ptr, 20),
                                               vadd_block(o.ptr, b.ptr, b.ptr, 11),
                                               vadd_block(o.ptr, a.ptr, b.ptr, 12)]


def test_arg_update_holds_the_buffers_it_sets(fake, vadd, stream):
    o, a, b = (bc.alloc(64) for _ in range(3))
    g, nodes = _chain(vadd, (o, a, b), n=2)
    exe = g.instantiate()
    upd = exe.prepare_args([(nodes[0], 0), (nodes[1], 2)])
    new = bc.alloc(64)
    ptr, ref = new.ptr, weakref.ref(new)
    upd.set(new, new)
    exe.launch(stream)
    del new, upd
    gc.collect()
    assert ref() is not None
    exe.launch(stream)
    assert fake.last_launch(1).params == vadd_block(ptr, a.ptr, b.ptr, 10)
    exe.prepare_args([(nodes[0], 0), (nodes[1], 2)]).set(o, b)
    stream.synchronize()
    gc.collect()
    assert ref() is None                     # replaced everywhere: gone


def test_prepare_args_refuses_bad_slots(fake, vadd):
    o = bc.alloc(64)
    g, nodes = _chain(vadd, (o, o, o), n=2)
    exe, other = g.instantiate(), g.instantiate()
    g2, nodes2 = _chain(vadd, (o, o, o), n=1)
    for slots, exc, msg in [
        ([(nodes[0], 4)], IndexError, "out of range"),
        ([(nodes[0], -1)], IndexError, "out of range"),
        ([(nodes[0], 1), (exe.kernel_node(nodes[0]), 1)], ValueError, "twice"),
        ([(other.kernel_node(nodes[0]), 1)], ValueError, "another executable"),
        ([(nodes2[0], 1)], ValueError, "another graph"),
        ([(nodes[0], "1")], TypeError, None),
        ([nodes[0]], TypeError, "pair"),
        ([(o, 1)], TypeError, "ExecKernelNode"),
    ]:
        with pytest.raises(exc, match=msg):
            exe.prepare_args(slots)
    assert len(exe.prepare_args([])) == 0
    exe.prepare_args([]).set()
    with pytest.raises(TypeError):
        bc.ArgUpdate()


def test_arg_update_follows_an_update_of_the_executable(fake, vadd, stream):
    o, a, b = (bc.alloc(64) for _ in range(3))
    g, nodes = _chain(vadd, (o, a, b), n=2)
    exe = g.instantiate()
    upd = exe.prepare_args([(nodes[1], 3)])
    g2, _ = _chain(vadd, (b, b, b), n=2)
    exe.update(g2)
    upd.set(99)
    assert _node_blocks(fake, exe, stream, 2) == [vadd_block(b.ptr, b.ptr, b.ptr, 10),
                                                  vadd_block(b.ptr, b.ptr, b.ptr, 99)]


ARG_VALUES = st.one_of(st.sampled_from(SCALAR_VALUES), st.integers(-2**64, 2**64), st.floats(allow_nan=False))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_arg_update_matches_set_arg_one_by_one(fake, ptx, stream, data):
    """Random slots of two nodes of every scalar type, random values: the batch gives
    the executable the bytes that set_arg, slot by slot, gives a twin executable, or
    refuses with set_arg's exception and changes nothing."""
    k = bc.Module.from_ptx(ptx.ALL_SCALARS).get_kernel("scalars")
    nargs = len(ptx.ALL_SCALARS_TYPES)
    g = bc.Graph()
    n0 = g.add_kernel(k, 1, 1, *([1] * nargs))
    n1 = g.add_kernel(k, 1, 1, *([2] * nargs), depends_on=n0)
    slots = data.draw(st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(0, nargs - 1)),
                               min_size=1, max_size=8, unique=True))
    values = data.draw(st.lists(ARG_VALUES, min_size=len(slots), max_size=len(slots)))
    exe, twin = g.instantiate(), g.instantiate()
    nodes = (n0, n1)
    upd = exe.prepare_args([(nodes[n], i) for n, i in slots])
    ref = _node_blocks(fake, exe, stream, 2)
    expected = None
    for (n, i), v in zip(slots, values):
        try:
            twin.kernel_node(nodes[n]).set_arg(i, v)
        except Exception as e:     # noqa: BLE001 -- the reference behaviour
            expected = type(e)
            break
    calls = fake.calls("cuGraphExecKernelNodeSetParams")
    if expected is not None:
        with pytest.raises(expected):
            upd.set(*values)
        assert fake.calls("cuGraphExecKernelNodeSetParams") == calls
        assert _node_blocks(fake, exe, stream, 2) == ref
    else:
        upd.set(*values)
        assert fake.calls("cuGraphExecKernelNodeSetParams") == calls + len({n for n, _ in slots})
        assert _node_blocks(fake, exe, stream, 2) == _node_blocks(fake, twin, stream, 2)
        for (n, i), v in zip(slots, values):
            assert exe.kernel_node(nodes[n]).args[i] is v


def test_update_applies_a_graph_of_the_same_shape(fake, vadd, stream):
    a, o = bc.alloc(64), bc.alloc(64)

    def build(n, out):
        g = bc.Graph()
        k = g.add_kernel(vadd, 1, 16, out, a, a, n)
        g.add_memset(out, 7, depends_on=k)
        return g, k
    g1, k1 = build(1, o)
    exe = g1.instantiate()
    h = exe.kernel_node(k1)
    g2, _ = build(2, a)
    exe.update(g2)
    assert h.args == (a, a, a, 2)          # handles follow the update
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(a.ptr, a.ptr, a.ptr, 2)
    h.set_arg(3, 4)
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(a.ptr, a.ptr, a.ptr, 4)


def test_update_failure_names_the_node_and_keeps_the_executable(fake, vadd, stream):
    a = bc.alloc(64)
    g1 = bc.Graph()
    g1.add_kernel(vadd, 1, 16, a, a, a, 1)
    g1.add_empty()
    exe = g1.instantiate()
    g2 = bc.Graph()
    g2.add_kernel(vadd, 1, 16, a, a, a, 2)
    g2.add_memset(a, 0)
    with pytest.raises(bc.CudaError) as info:
        exe.update(g2)
    assert info.value.code == 910
    assert "node #1 (memset)" in str(info.value) and "type changed" in str(info.value)
    g3 = bc.Graph()
    g3.add_kernel(vadd, 1, 16, a, a, a, 3)
    with pytest.raises(bc.CudaError, match="topology changed"):
        exe.update(g3)
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(a.ptr, a.ptr, a.ptr, 1)


def test_enable_disable(fake, vadd, stream):
    a = bc.alloc(64)
    g = bc.Graph()
    k = g.add_kernel(vadd, 1, 16, a, a, a, 1)
    e = g.add_empty(depends_on=k)
    exe = g.instantiate()
    assert exe.is_enabled(k)
    exe.set_enabled(k, False)
    assert not exe.is_enabled(k)
    n0 = fake.launch_count()
    exe.launch(stream)
    assert fake.launch_count() == n0
    exe.set_enabled(k, True)
    exe.launch(stream)
    assert fake.launch_count() == n0 + 1
    with pytest.raises(bc.CudaInvalidValueError):
        exe.set_enabled(e, False)          # the driver enables kernels, copies and memsets only


def test_instantiate_flags_and_upload(fake, vadd, stream):
    g = bc.Graph()
    g.add_kernel(vadd, 1, 1, 0, 0, 0, 0)
    assert g.instantiate().flags == 0
    exe = g.instantiate(upload=stream, auto_free_on_launch=True, use_node_priority=True)
    assert exe.flags == 1 | 2 | 8
    assert fake.calls("cuGraphInstantiateWithParams") >= 1
    exe.upload(stream)
    exe.launch(stream)
    dev = g.instantiate(upload=stream, device_launch=True)      # a kernel-only graph may be device-launched
    assert dev.flags == 2 | 4
    dev.launch(stream)
    stream.synchronize()


def test_kernel_node_priority_is_the_nodes_attribute_and_runs_with_use_node_priority(fake, vadd, stream):
    """add_kernel(priority=)/add_plan(priority=) and KernelNode.set_priority/get_priority set and read the
    node's CU_LAUNCH_ATTRIBUTE_PRIORITY; an executable instantiated with
    use_node_priority=True launches each kernel at its node's priority, one without at
    the stream's. Out-of-range values and non-ints are refused before the attribute call."""
    lo, hi = bc.Device(0).stream_priority_range()          # (least, greatest): hi is the lower number
    assert hi < lo
    g = bc.Graph()
    a = g.add_kernel(vadd, 1, 1, 0, 0, 0, 1, priority=hi)
    b = g.add_plan(vadd.bind(1, 1, 0, 0, 0, 2), depends_on=[a], priority=hi + 1)
    c = g.add_kernel(vadd, 1, 1, 0, 0, 0, 3, depends_on=[b])
    assert (a.get_priority(), b.get_priority(), c.get_priority()) == (hi, hi + 1, 0)
    c.set_priority(lo)
    assert c.get_priority() == lo
    sets = fake.calls("cuGraphKernelNodeSetAttribute")
    for bad, err in ((lo + 1, ValueError), (hi - 1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="priority" if err is ValueError else None):
            c.set_priority(bad)
        with pytest.raises(err):
            g.add_kernel(vadd, 1, 1, 0, 0, 0, 4, priority=bad)
    assert fake.calls("cuGraphKernelNodeSetAttribute") == sets and len(g.nodes()) == 3
    with pytest.raises(ValueError, match=r"range -?\d+\.\.-?\d+"):
        a.set_priority(lo + 7)
    n_ints = []
    for flag in (True, False):
        before = fake.launch_count()
        g.instantiate(use_node_priority=flag).launch(stream)
        stream.synchronize()
        assert fake.launch_count() - before == 3
        got = [fake.last_launch(back) for back in (2, 1, 0)]
        n_ints.append([struct.unpack_from("<I", x.params, 24)[0] for x in got])
        assert [x.priority for x in got] == ([hi, hi + 1, lo] if flag else [0, 0, 0])
    assert n_ints == [[1, 2, 3], [1, 2, 3]]
    cfg_plan = vadd.bind_config(bc.LaunchConfig(1, 1, priority=hi), 0, 0, 0, 5)
    with pytest.raises(ValueError, match="contradicts the plan's LaunchConfig priority"):
        g.add_plan(cfg_plan, priority=lo)
    assert len(g.nodes()) == 3
    assert g.add_plan(cfg_plan).get_priority() == hi == g.add_plan(cfg_plan, priority=hi).get_priority()


def test_kernel_node_priority_driver_failure_is_typed_and_removes_the_node(fake, vadd):
    """A refused priority attribute takes the new node out again (cuGraphDestroyNode): the
    graph is as before, and a later add works."""
    g = bc.Graph()
    first = g.add_kernel(vadd, 1, 1, 0, 0, 0, 1)
    fake.fail("cuGraphKernelNodeSetAttribute", 1)        # CUDA_ERROR_INVALID_VALUE
    destroyed = fake.calls("cuGraphDestroyNode")
    with pytest.raises(bc.CudaError, match="cuGraphKernelNodeSetAttribute") as ei:
        g.add_kernel(vadd, 1, 1, 0, 0, 0, 1, priority=-1, depends_on=first)
    assert ei.value.code == 1 and fake.calls("cuGraphDestroyNode") == destroyed + 1
    assert g.nodes() == [first] and g.edges() == []
    node = g.add_kernel(vadd, 1, 1, 0, 0, 0, 1, priority=-1, depends_on=first)
    assert node.get_priority() == -1 and node.index == 1 and g.edges() == [(first, node, "full")]


def test_instantiate_failure_names_the_node(fake, stream):
    g = bc.Graph()
    g.add_empty()
    g.add_host(lambda: None)
    with pytest.raises(bc.CudaError, match=r"node #1 \(host\).*device"):
        g.instantiate(upload=stream, device_launch=True)


def test_closed_objects_refuse_use(fake, vadd, stream):
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 1, 0, 0, 0, 0)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    exe.close()
    exe.close()
    with pytest.raises(ValueError, match="closed"):
        exe.launch(stream)
    with pytest.raises(ValueError, match="closed"):
        h.set_arg(3, 1)
    g.close()
    with pytest.raises(ValueError, match="closed"):
        g.add_empty()
    with pytest.raises(TypeError):
        bc.GraphExec()


# ------------------------------------------------------------------ the heap stays flat
def test_set_arg_and_launch_do_not_grow_the_heap(fake, vadd, stream):
    a, b = bc.alloc(64), bc.alloc(64)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, a, a, a, 1)
    exe = g.instantiate()
    h = exe.kernel_node(node)

    def step(i):
        h.set_arg(3, i)
        h.set_arg(0, b if i & 1 else a)
        exe.launch(stream)

    _assert_heap_flat(step)


def _assert_heap_flat(step):
    """step(i) for 200 warm-up rounds, then 5,000 traced rounds: the heap grows < 4 KiB."""
    for i in range(200):                                     # warm caches
        step(i)
    tracemalloc.start()
    # Collected once while tracing, before the first snapshot: the free-threaded collector
    # keeps buffers that its first traced collection allocates (4 KiB on 3.13t), in both
    # snapshots this way. tracemalloc's own allocations do not count either.
    gc.collect()
    snap0 = tracemalloc.take_snapshot()
    for i in range(5000):
        step(i)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    mine = [tracemalloc.Filter(False, tracemalloc.__file__)]
    grown = sum(s.size_diff for s in snap1.filter_traces(mine).compare_to(snap0.filter_traces(mine), "filename")
                if s.size_diff > 0)
    assert grown < 4096, grown


def test_arg_update_and_launch_do_not_grow_the_heap(fake, vadd, stream):
    a, b = bc.alloc(64), bc.alloc(64)
    g, nodes = _chain(vadd, (a, a, a))
    exe = g.instantiate()
    upd = exe.prepare_args([(nodes[0], 3), (nodes[0], 0), (nodes[2], 1)])

    def step(i):
        upd.set(i, b if i & 1 else a, a if i & 1 else b)
        exe.launch(stream)

    _assert_heap_flat(step)


def test_kernel_node_priority_property_is_a_deprecated_alias(fake, vadd):
    """KernelNode.priority (a property that called the driver) still works for one
    release, with a DeprecationWarning naming get_priority/set_priority."""
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 32, 0, 0, 0, 1)
    with pytest.warns(DeprecationWarning, match="get_priority"):
        assert node.priority == node.get_priority() == 0
    with pytest.warns(DeprecationWarning, match="set_priority"):
        node.priority = -1
    assert node.get_priority() == -1
