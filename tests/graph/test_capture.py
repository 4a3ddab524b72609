"""Stream capture against the fake driver: what a capture records and holds, set_arg
on captured kernel nodes, capture modes, errors inside and outside the block, pool
allocations that become graph memory, and a driver without the graph entry points.
Copies and memsets in a capture: test_capture_copies.py.
"""
import gc
import struct
import weakref

import pytest

import barecuda as bc
from _helpers import fake_read as read, fake_write as write, graphs_live, vadd_block


# ------------------------------------------------------------------ capture
def test_capture_records_launches_plans_copies_and_events(fake, vadd, stream):
    a, o = bc.alloc(256), bc.alloc(256)
    write(a, bytes(range(256)))
    plan = vadd.bind(1, 32, o, a, a, 7, stream=stream)
    plans = bc.PlanList([plan, plan])
    side = bc.Stream()
    n0 = fake.launch_count()
    with stream.capture() as g:
        assert bc.is_capturing(stream)
        vadd.launch(1, 32, o, a, a, 5, stream=stream)
        plan()
        plans()
        o.copy_from(a, stream=stream)                        # device to device
        ev = stream.record(timing=False)
        side.wait(ev)                                        # fork ...
        vadd.launch(1, 32, o, a, a, 6, stream=side)
        stream.wait(side)                                    # ... and join
    assert not bc.is_capturing(stream)
    assert fake.launch_count() == n0                         # nothing ran
    assert g.captured and g.num_nodes() == 6
    assert [n.kind for n in g.nodes()] == ["kernel"] * 4 + ["memcpy", "kernel"]
    write(o, bytes(256))
    exe = g.instantiate()
    exe.launch(stream)
    assert fake.launch_count() == n0 + 5
    assert [struct.unpack_from("<I", fake.last_launch(b).params, 24)[0] for b in range(5)] == [6, 7, 7, 7, 5]
    assert read(o) == bytes(range(256))


def test_captured_kernel_nodes_take_set_arg_with_launchs_checks(fake, ptx, vadd, stream):
    """Kernel nodes of a captured graph come back as KernelNodes (kernel, dimensions and
    parameter bytes from the driver) and take exec handles like explicit ones."""
    a, o = bc.alloc(256), bc.alloc(256)
    other = bc.Module.from_ptx(ptx.ALL_SCALARS).get_kernel("scalars")
    plan = vadd.bind(2, 32, a, o, o, 4, stream=stream)
    with stream.capture() as g:
        vadd.launch(1, 16, o, a, a, 3, stream=stream, shared_mem=128)
        plan()
        o.copy_from(a, stream=stream)
        other.launch(1, 1, *([1] * len(ptx.ALL_SCALARS_TYPES)), stream=stream)
        vadd.launch((1, 2), (8, 2), a, a, o, 5, stream=stream)
    kinds = [n.kind for n in g.nodes()]
    assert kinds == ["kernel", "kernel", "memcpy", "kernel", "kernel"]
    ks = g.kernel_nodes()
    assert [n.kernel for n in ks] == [vadd, vadd, other, vadd]
    assert [(n.grid, n.block, n.shared_mem) for n in ks] == [
        ((1, 1, 1), (16, 1, 1), 128), ((2, 1, 1), (32, 1, 1), 0), ((1, 1, 1), (1, 1, 1), 0),
        ((1, 2, 1), (8, 2, 1), 0)]
    assert ks[0].args == (None,) * 4                    # the driver keeps bytes, not objects
    assert g.kernel_nodes() == ks and g.nodes()[0] is ks[0]   # one object per node
    exe = g.instantiate()
    h = exe.kernel_node(ks[3])
    with pytest.raises(OverflowError):
        h.set_arg(3, -2**31 - 1)
    with pytest.raises(TypeError):
        h.set_arg(0, 1.5)
    h.set_arg(3, 9)
    h.set_arg(0, o)
    assert h.args == (o, None, None, 9)
    hp = exe.kernel_node(ks[1])
    hp.set_dims(grid=3)
    exe.launch(stream)
    launched = [fake.last_launch(b) for b in range(4)]  # newest first
    assert launched[0].params == vadd_block(o.ptr, a.ptr, o.ptr, 9)
    assert launched[2].params == vadd_block(a.ptr, o.ptr, o.ptr, 4) and launched[2].grid == (3, 1, 1)
    assert launched[3].params == vadd_block(o.ptr, a.ptr, a.ptr, 3)
    ks[0].set_arg(3, 11)                                 # the graph's own node (later instantiations)
    g.instantiate().launch(stream)
    assert fake.last_launch(3).params == vadd_block(o.ptr, a.ptr, a.ptr, 11)


def test_capture_holds_what_launches_use(fake, vadd, stream):
    """No keep_alive needed: kernels, arguments and plans launched into a capture live as
    long as the graph and its executables; a launch on a stream outside the capture
    is not held."""
    bufs = [bc.alloc(64) for _ in range(4)]
    refs = [weakref.ref(b) for b in bufs]
    side = bc.Stream()
    plan = vadd.bind(1, 1, bufs[1], bufs[1], bufs[1], 1, stream=stream)
    with stream.capture() as g:
        vadd.launch(1, 1, bufs[0], bufs[0], bufs[0], 1, stream=stream)
        plan()
        bc.launch_all([vadd.bind(1, 1, bufs[2], bufs[2], bufs[2], 1, stream=stream)])
        vadd.launch(1, 1, bufs[3], bufs[3], bufs[3], 1, stream=side)   # not captured: runs now
    del bufs, plan
    gc.collect()
    assert [r() is not None for r in refs] == [True, True, True, False]   # bufs[1]: through the plan
    exe = g.instantiate()
    del g
    gc.collect()
    assert all(r() is not None for r in refs[:3])
    exe.launch(stream)
    del exe
    gc.collect()
    assert all(r() is None for r in refs)


def test_capture_holds_arguments_that_move_between_positions(fake, vadd, stream):
    """The recorder skips the set lookups for an argument the previous launch had at the
    same position: objects that move between positions, come and go, or change inside
    a reused plan's argument list are still all held."""
    bufs = [bc.alloc(64) for _ in range(6)]
    refs = [weakref.ref(b) for b in bufs]
    plan = vadd.bind(1, 1, bufs[0], bufs[0], bufs[0], 1, stream=stream)
    with stream.capture() as g:
        vadd.launch(1, 1, bufs[0], bufs[1], bufs[0], 1, stream=stream)
        vadd.launch(1, 1, bufs[1], bufs[0], bufs[0], 2, stream=stream)
        vadd.launch(1, 1, bufs[1], bufs[2], 7, 3, stream=stream)
        vadd.launch(1, 1, bufs[1], bufs[2], bufs[3], 3, stream=stream)
        plan()
        plan.set_arg(2, bufs[4])
        plan()
        plan.set_arg(0, bufs[5])
        plan()
        plan.set_arg(0, bufs[0])
    del bufs, plan
    gc.collect()
    assert all(r() is not None for r in refs)
    exe = g.instantiate()
    exe.launch(stream)
    del g, exe
    gc.collect()
    assert all(r() is None for r in refs)


def test_capture_holds_every_value_a_reused_plan_launched(fake, vadd, stream):
    """A capture holds each object once however often it is launched, but a plan's
    values are held as they were at each launch: a plan re-set between two captured
    launches leaves the graph holding both buffers (and their memory allocated after
    close()), not only the plan."""
    pool = bc.MemoryPool(0)
    b1, b2, b3 = (pool.alloc(4096, stream=stream) for _ in range(3))
    p1, p2 = b1.ptr, b2.ptr
    plan = vadd.bind(1, 16, b1, b1, b1, 1, stream=stream)
    with stream.capture() as g:
        for _ in range(40):
            plan()
        for i in range(3):
            plan.set_arg(i, b2)
        plan()
        for _ in range(40):
            vadd.launch(1, 16, b1, b1, b1, 2, stream=stream)
    for i in range(3):
        plan.set_arg(i, b3)                         # the plan no longer holds b1 or b2
    b1.close()
    b2.close()
    exe = g.instantiate()
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(p1, p1, p1, 2)
    assert fake.last_launch(40).params == vadd_block(p2, p2, p2, 1)
    assert fake.last_launch(41).params == vadd_block(p1, p1, p1, 1)
    stream.synchronize()
    again = [pool.alloc(4096, stream=stream) for _ in range(6)]
    assert not {p1, p2} & {b.ptr for b in again}   # still the graph's
    in_use = pool.stats()["in_use"]
    del g, exe
    gc.collect()
    assert pool.stats()["in_use"] == in_use - 2 * 4096


def test_executables_hold_what_the_graph_gained_since_an_earlier_instantiation(fake, vadd, stream):
    """Instantiate and update reuse the graph's reference snapshot while the graph is
    unchanged; a node re-set on the graph, or a node added to a conditional body, makes
    the next one take a new snapshot: once the graph is closed, each executable holds
    what the graph referenced at its instantiation or latest update."""
    a = bc.alloc(64)
    z, w = bc.alloc(64), bc.alloc(64)
    zp, wp = z.ptr, w.ptr
    refs = [weakref.ref(z), weakref.ref(w)]
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 16, a, a, a, 1)
    cond = g.add_if(g.conditional_handle(default=1), depends_on=node)
    cond.bodies[0].add_kernel(vadd, 1, 16, a, a, a, 2)
    exe = g.instantiate()
    exe.update(g)                                   # the same snapshot again
    node.set_arg(0, z)                              # the graph now references z ...
    exe.update(g)                                   # ... and so does the executable
    exe1 = g.instantiate()
    cond.bodies[0].add_kernel(vadd, 1, 16, w, w, w, 3)   # a body gains w after exe1
    exe2 = g.instantiate()
    g.close()                                       # executables now hold only their snapshots
    del z, w, g, node, cond
    gc.collect()
    assert [r() is not None for r in refs] == [True, True]
    n0 = fake.launch_count()
    exe2.launch(stream)
    assert fake.launch_count() - n0 == 3
    assert fake.last_launch().params == vadd_block(wp, wp, wp, 3)
    del exe2
    gc.collect()
    assert [r() is not None for r in refs] == [True, False]   # nothing else held w
    del exe1
    gc.collect()
    assert refs[0]() is not None                    # exe's update took z
    exe.launch(stream)
    assert fake.last_launch(1).params == vadd_block(zp, a.ptr, a.ptr, 1)
    del exe
    gc.collect()
    assert refs[0]() is None


def test_a_list_given_to_keep_alive_is_read_at_each_instantiation(fake, vadd):
    """keep_alive(list): what the list holds when an executable is made is what the
    executable holds once the graph is closed (a list that grew since is read again)."""
    a, y = bc.alloc(64), bc.alloc(64)
    ref = weakref.ref(y)
    held = [a]
    g = bc.Graph()
    g.add_kernel(vadd, 1, 16, a, a, a, 1)
    g.keep_alive(held)
    exe1 = g.instantiate()
    held.append(y)
    exe2 = g.instantiate()
    g.close()
    del held, y, g
    gc.collect()
    assert ref() is not None
    del exe2
    gc.collect()
    assert ref() is None                            # exe1 was made before y was in the list
    del exe1


def test_update_from_a_captured_graph_refreshes_handles(fake, vadd, stream):
    a, o = bc.alloc(64), bc.alloc(64)

    def cap(out, n):
        with stream.capture() as g:
            vadd.launch(1, 16, out, a, a, n, stream=stream)
            vadd.launch(1, 16, out, out, a, n + 1, stream=stream)
        return g
    g1 = cap(o, 1)
    exe = g1.instantiate()
    h = exe.kernel_node(g1.kernel_nodes()[1])
    exe.update(cap(a, 5))
    h.set_arg(3, 8)                                     # the rest of the block is the update's
    exe.launch(stream)
    assert fake.last_launch().params == vadd_block(a.ptr, a.ptr, a.ptr, 8)
    assert fake.last_launch(1).params == vadd_block(a.ptr, a.ptr, a.ptr, 5)


def test_capture_module_function_and_modes(fake, vadd):
    s = bc.Stream()
    for mode in ("global", "thread_local", "relaxed"):
        with bc.capture(s, mode=mode) as g:
            vadd.launch(1, 1, 0, 0, 0, 0, stream=s)
        assert g.num_nodes() == 1
    with pytest.raises(ValueError, match="mode"):
        bc.capture(s, mode="loose")
    with pytest.raises(ValueError, match="legacy"):
        bc.capture(None)
    with pytest.raises(ValueError, match="legacy"):
        bc.Stream.default().capture()


def test_uncapturable_operation_raises_and_leaves_the_stream_usable(fake, vadd):
    s = bc.Stream()
    a = bc.alloc(64)
    g0 = graphs_live(fake)
    with pytest.raises(bc.CudaStreamCaptureError) as info:
        with s.capture() as g:
            vadd.launch(1, 1, a, a, a, 1, stream=s)
            s.synchronize()
    assert "cuStreamSynchronize" in str(info.value)
    assert not bc.is_capturing(s)
    assert graphs_live(fake) == g0                           # the partial graph was discarded
    with pytest.raises(ValueError, match="closed"):
        g.instantiate()
    s.synchronize()
    vadd.launch(1, 1, a, a, a, 1, stream=s)                  # usable again


def test_error_caught_inside_the_block_invalidates_the_capture(fake, vadd):
    s = bc.Stream()
    g0 = graphs_live(fake)
    with pytest.raises(bc.CudaStreamCaptureError, match="invalidated") as info:
        with s.capture():
            try:
                s.query()
            except bc.CudaStreamCaptureError as e:
                assert "cuStreamQuery" in str(e)
    assert info.value.call == "cuStreamEndCapture" and info.value.code == 901
    assert graphs_live(fake) == g0 and not bc.is_capturing(s)


def test_exception_in_the_block_discards_the_graph(fake, vadd):
    s = bc.Stream()
    g0 = graphs_live(fake)
    with pytest.raises(ZeroDivisionError):
        with s.capture() as g:
            vadd.launch(1, 1, 0, 0, 0, 0, stream=s)
            1 / 0
    assert graphs_live(fake) == g0 and not bc.is_capturing(s)
    with pytest.raises(ValueError):
        g.num_nodes()


def test_graph_is_unusable_during_its_capture(fake):
    s = bc.Stream()
    with s.capture() as g:
        with pytest.raises(ValueError, match="still being captured"):
            g.num_nodes()


def test_unsafe_call_in_global_mode_is_refused(fake):
    s = bc.Stream()
    with pytest.raises(bc.CudaStreamCaptureError):
        with s.capture(mode="global"):
            bc.managed_empty(16)                             # cuMemAllocManaged: unsafe in a global capture
    assert not bc.is_capturing(s)


def test_pool_allocations_in_a_capture_become_graph_memory(fake, vadd):
    s = bc.Stream()
    pool = bc.MemoryPool(0)
    warm = pool.alloc(4096, stream=s)
    del warm                                                 # a cached block on s
    mem0 = fake.live("mem")
    async0 = fake.calls("cuMemAllocAsync")
    with s.capture() as g:
        tmp = pool.alloc(4096, stream=s)                     # not the cached block
        vadd.launch(1, 1, tmp, tmp, tmp, 1, stream=s)
        out = pool.alloc(4096, stream=s)
        vadd.launch(1, 1, out, tmp, tmp, 1, stream=s)
        del tmp                                              # a free node
    assert fake.calls("cuMemAllocAsync") == async0 + 2
    assert [n.kind for n in g.nodes()] == ["mem_alloc", "kernel", "mem_alloc", "kernel", "mem_free"]
    exe = g.instantiate()
    exe.launch(s)
    s.synchronize()
    del out                                                  # graph memory freed outside: cuMemFreeAsync
    del exe, g
    gc.collect()
    assert fake.live("mem") == mem0


def test_a_buffer_made_at_a_dropped_graph_buffers_address_is_held(fake, vadd):
    """The capture holds each object once, by address, but graph memory is not held: a
    buffer object made later in the capture where a dropped graph-memory buffer object
    was (CPython reuses the memory of freed objects) is held like any other."""
    s = bc.Stream()
    pool = bc.MemoryPool(0)
    big = pool.alloc(4096, stream=s)
    ref = weakref.ref(big)
    reused = False
    with s.capture() as g:
        for _ in range(50):
            tmp = pool.alloc(256, stream=s)                  # graph memory: not held
            vadd.launch(1, 1, tmp, tmp, tmp, 1, stream=s)
            where = id(tmp)
            del tmp                                          # a free node; the object goes
            view = big[0:256]                                # a view holds big's allocation
            reused = id(view) == where
            vadd.launch(1, 1, view, view, view, 2, stream=s)
            if reused:
                break
    if not reused:
        pytest.skip("CPython did not reuse an object's address in this run")
    del view, big
    gc.collect()
    assert ref() is not None                                 # the graph holds the view
    del g
    gc.collect()
    assert ref() is None


def test_missing_graph_entry_point_names_the_driver_version(fake_lib_path):
    """An optional entry point the driver lacks: DriverVersionError with the version from
    the ABI table (not a hand-typed one), raised before any other driver call."""
    import os
    import subprocess
    import sys
    code = """
import barecuda as bc
from barecuda._loader import symbols
g = bc.Graph()
try:
    g.conditional_handle()
except bc.DriverVersionError as e:
    print("ERR", symbols()["cuGraphConditionalHandleCreate"][0], e)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKECUDA_")}
    env.update(BARECUDA_LIBCUDA=fake_lib_path, FAKECUDA_HIDE="cuGraphConditionalHandleCreate")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("ERR ")][0]
    _, need, msg = line.split(" ", 2)
    need = int(need)
    assert "cuGraphConditionalHandleCreate" in msg and "CUDA graphs" in msg
    assert f"CUDA {need // 1000}.{need % 1000 // 10} driver or newer" in msg
