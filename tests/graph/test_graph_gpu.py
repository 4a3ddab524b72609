"""CUDA graphs on a real GPU (``pytest --gpu``): results against numpy on fresh random
data, a WHILE loop that a kernel ends (nvcc + cudadevrt), and heap growth over many
set_arg + launch rounds.
"""
import gc
import os
import shutil
import subprocess
import sys
import tracemalloc

import pytest

from ptx import gpu as P

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import Module
from _helpers import REPO

gpu = pytest.mark.gpu
RNG = np.random.default_rng()


@pytest.fixture(scope="module")
def vadd():
    return Module.from_ptx(P.VADD).get_kernel("vadd")


def fresh(n):
    return RNG.standard_normal(n).astype(np.float32)


def blocks(n):
    return (n + 255) // 256


@gpu
def test_explicit_graph_chain_matches_numpy(vadd):
    n = 100_003
    s = bc.Stream()
    a, b = fresh(n), fresh(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    c, d = bc.empty(n, "float32", stream=s), bc.empty(n, "float32", stream=s)
    host = bc.pinned_empty(n, "float32")
    seen = []
    g = bc.Graph()
    k1 = g.add_kernel(vadd, blocks(n), 256, c, da, db, n)           # c = a + b
    k2 = g.add_kernel(vadd, blocks(n), 256, d, c, db, n, depends_on=k1)   # d = c + b
    cp = g.add_memcpy(host, d, depends_on=k2)
    g.add_host(lambda: seen.append(host.copy()), depends_on=cp)
    exe = g.instantiate(upload=s)
    exe.launch(s)
    exe.synchronize()
    np.testing.assert_array_equal(host, (a + b) + b)
    np.testing.assert_array_equal(seen[0], (a + b) + b)


@gpu
def test_node_priorities_are_kept_and_run_with_use_node_priority(vadd):
    """Explicit kernel nodes at the device's highest and lowest priority and one at the
    default, read back from the driver, instantiated with use_node_priority=True and
    launched into a low-priority stream: the results match numpy. A launch captured on
    a high-priority stream carries that stream's priority into its node."""
    n = 50_001
    lo, hi = bc.Device(0).stream_priority_range()
    s = bc.Stream(priority=lo)
    a, b = fresh(n), fresh(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    c, d, e = (bc.empty(n, "float32", stream=s) for _ in range(3))
    s.synchronize()
    g = bc.Graph()
    k1 = g.add_kernel(vadd, blocks(n), 256, c, da, db, n, priority=hi)             # c = a + b
    k2 = g.add_plan(vadd.bind(blocks(n), 256, d, da, da, n), priority=lo)         # d = a + a
    k3 = g.add_kernel(vadd, blocks(n), 256, e, c, d, n, depends_on=[k1, k2])      # e = c + d
    assert (k1.get_priority(), k2.get_priority(), k3.get_priority()) == (hi, lo, 0)
    k3.set_priority(hi)
    assert k3.get_priority() == hi
    exe = g.instantiate(use_node_priority=True)
    for _ in range(2):
        exe.launch(s)
        np.testing.assert_array_equal(e.to_numpy(stream=s), (a + b) + (a + a))
    high = bc.Stream(priority=hi)
    with high.capture() as cg:
        vadd.launch(blocks(n), 256, c, db, db, n, stream=high)
    cg.keep_alive(c, db)
    (node,) = cg.kernel_nodes()
    assert node.get_priority() == high.priority == hi
    cg.instantiate(use_node_priority=True).launch(high)
    np.testing.assert_array_equal(c.to_numpy(stream=high), b + b)


@gpu
def test_capture_replay_and_set_arg_match_numpy(vadd):
    n = 65_537
    s = bc.Stream()
    a, b, e = fresh(n), fresh(n), fresh(n)
    da, db, de = (bc.to_device(x, stream=s) for x in (a, b, e))
    out = bc.empty(n, "float32", stream=s)
    s.synchronize()
    with s.capture() as g:
        vadd.launch(blocks(n), 256, out, da, db, n, stream=s)
        vadd.launch(blocks(n), 256, out, out, db, n, stream=s)
    g.keep_alive(da, db, de, out)
    assert g.num_nodes() == 2
    exe = g.instantiate()
    for _ in range(3):
        exe.launch(s)
        np.testing.assert_array_equal(out.to_numpy(stream=s), (a + b) + b)

    # the same chain built explicitly, then changed through kernel-node handles
    g2 = bc.Graph()
    k1 = g2.add_kernel(vadd, blocks(n), 256, out, da, db, n)
    k2 = g2.add_kernel(vadd, blocks(n), 256, out, out, db, n, depends_on=k1)
    x2 = g2.instantiate()
    retarget_and_check(s, x2, x2.kernel_node(k1), x2.kernel_node(k2), out, de, b, e, n // 2)


@gpu
def test_arg_update_changes_a_chain_then_replays_it(vadd):
    """A 3-kernel chain whose pointers and lengths change through one ArgUpdate per
    step (one push per node), replayed and compared with numpy each step."""
    n = 50_001
    s = bc.Stream()
    xs = [fresh(n) for _ in range(4)]
    dx = [bc.to_device(x, stream=s) for x in xs]
    t1, t2 = (bc.empty(n, "float32", stream=s) for _ in range(2))
    out = bc.zeros(n, "float32", stream=s)
    g = bc.Graph()
    k1 = g.add_kernel(vadd, blocks(n), 256, t1, dx[0], dx[1], n)          # t1 = x0 + x1
    k2 = g.add_kernel(vadd, blocks(n), 256, t2, t1, dx[2], n, depends_on=k1)   # t2 = t1 + x2
    k3 = g.add_kernel(vadd, blocks(n), 256, out, t2, dx[3], n, depends_on=k2)  # out = t2 + x3
    exe = g.instantiate(upload=s)
    upd = exe.prepare_args([(k1, 1), (k1, 2), (k2, 2), (k3, 2), (k1, 3), (k2, 3), (k3, 3)])
    for step in range(6):
        p = RNG.permutation(4)
        m = int(RNG.integers(1, n + 1))
        before = out.to_numpy(stream=s)
        upd.set(dx[p[0]], dx[p[1]], dx[p[2]], dx[p[3]], m, m, m)
        exe.launch(s)
        got = out.to_numpy(stream=s)
        expect = before.copy()
        expect[:m] = ((xs[p[0]][:m] + xs[p[1]][:m]) + xs[p[2]][:m]) + xs[p[3]][:m]
        np.testing.assert_array_equal(got, expect, err_msg=f"step {step}")


def retarget_and_check(s, exe, h1, h2, out, de, b, e, part):
    """Handles on the two nodes of ``out = a + b; out = out + b``: make it ``out = e + b;
    out = out + e``, then shorten both to ``part`` elements; compare with numpy."""
    n = out.size
    h1.set_arg(1, de)                                   # out = e + b
    h2.set_arg(2, de)                                   # out = out + e
    exe.launch(s)
    np.testing.assert_array_equal(out.to_numpy(stream=s), (e + b) + e)
    h1.set_arg(3, part)
    h2.set_arg(3, part)
    out.copy_from(np.zeros(n, np.float32), stream=s)
    exe.launch(s)
    got = out.to_numpy(stream=s)
    np.testing.assert_array_equal(got[:part], ((e + b) + e)[:part])
    np.testing.assert_array_equal(got[part:], np.zeros(n - part, np.float32))


@gpu
def test_captured_kernel_nodes_take_set_arg_and_hold_their_buffers(vadd):
    """A captured graph with no keep_alive: its inputs dropped by the caller stay alive
    (the capture holds them); its kernel nodes come back with the driver's dimensions
    and change through exec handles, compared with numpy."""
    n = 50_001
    s = bc.Stream()
    a, b, e = fresh(n), fresh(n), fresh(n)
    da, db, de = (bc.to_device(x, stream=s) for x in (a, b, e))
    out = bc.empty(n, "float32", stream=s)
    s.synchronize()
    with s.capture() as g:
        vadd.launch(blocks(n), 256, out, da, db, n, stream=s)          # out = a + b
        vadd.launch(blocks(n), 256, out, out, db, n, stream=s)         # out = out + b
    del da, db
    gc.collect()
    k1, k2 = g.kernel_nodes()
    assert (k1.kernel, k1.grid, k1.block, k1.shared_mem) == (vadd, (blocks(n), 1, 1), (256, 1, 1), 0)
    exe = g.instantiate()
    for _ in range(2):
        exe.launch(s)
        np.testing.assert_array_equal(out.to_numpy(stream=s), (a + b) + b)
    h1, h2 = exe.kernel_node(k1), exe.kernel_node(k2)
    with pytest.raises(OverflowError):
        h1.set_arg(3, -2**31 - 1)
    retarget_and_check(s, exe, h1, h2, out, de, b, e, n // 3)


@gpu
@pytest.mark.parametrize("allocator", ["pool", "driver"])
def test_captured_copies_and_memsets_hold_their_buffers(vadd, allocator):
    """A device-to-device copy, a pinned host-to-device copy, a 32-bit memset, two
    kernels and a device-to-pinned copy captured with no keep_alive; every source is
    dropped and the freed (or cached) memory handed to new buffers full of other
    numbers. The graph holds what its copies and memset use: every replay matches
    numpy."""
    n = 40_961
    s = bc.Stream()
    al = bc.DriverAllocator(0) if allocator == "driver" else None
    a, b = fresh(n), fresh(n)
    da = bc.to_device(a, stream=s, allocator=al)
    hb = bc.pinned_empty(n, "float32")
    hb[:] = b
    tmp, db, ones, out = (bc.empty(n, "float32", stream=s, allocator=al) for _ in range(4))
    host_out = bc.pinned_empty(n, "float32")
    s.synchronize()
    with s.capture() as g:
        tmp.copy_from(da, stream=s)                                   # D2D
        db.copy_from(hb, stream=s)                                    # pinned -> device
        ones.memset(0x3F800000, width=32, stream=s)                   # 1.0f
        vadd.launch(blocks(n), 256, out, tmp, ones, n, stream=s)      # out = a + 1
        vadd.launch(blocks(n), 256, out, out, db, n, stream=s)        # out = out + b
        out.copy_to(host_out, stream=s)                               # device -> pinned
    assert [x.kind for x in g.nodes()] == ["memcpy", "memcpy", "memset", "kernel", "kernel", "memcpy"]
    del da, hb, tmp, db, ones
    gc.collect()
    junk = [bc.to_device(fresh(n), stream=s, allocator=al) for _ in range(6)]   # reuses freed blocks
    junk_host = [bc.pinned_empty(n, "float32") for _ in range(2)]
    for h in junk_host:
        h[:] = fresh(n)
    exe = g.instantiate()
    del g
    gc.collect()
    expected = (a + np.float32(1)) + b
    for _ in range(4):
        out.memset(0xFF, stream=s)
        host_out[:] = 0
        exe.launch(s)
        s.synchronize()
        np.testing.assert_array_equal(host_out, expected)
        np.testing.assert_array_equal(out.to_numpy(stream=s), expected)
    del exe, junk, junk_host
    gc.collect()


@gpu
def test_uncapturable_copies_are_refused_and_the_capture_goes_on(vadd):
    """A pageable copy in a capture is refused before the driver sees it; the capture
    goes on and its graph runs."""
    n = 4096
    s = bc.Stream()
    a = fresh(n)
    da = bc.to_device(a, stream=s)
    out = bc.empty(n, "float32", stream=s)
    s.synchronize()
    with s.capture() as g:
        with pytest.raises(bc.CudaStreamCaptureError, match="copy_from"):
            out.copy_from(fresh(n), stream=s)
        with pytest.raises(bc.CudaStreamCaptureError, match="to_numpy"):
            out.to_numpy(stream=s)
        vadd.launch(blocks(n), 256, out, da, da, n, stream=s)
    exe = g.instantiate()
    exe.launch(s)
    np.testing.assert_array_equal(out.to_numpy(stream=s), a + a)


@gpu
def test_update_and_enable_disable_match_numpy(vadd):
    n = 4099
    s = bc.Stream()
    a, b = fresh(n), fresh(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    out = bc.empty(n, "float32", stream=s)

    def build(x, y):
        g = bc.Graph()
        m = g.add_memset(out, 0, element_size=4)
        g.add_kernel(vadd, blocks(n), 256, out, x, y, n, depends_on=m)
        return g
    g1 = build(da, da)
    exe = g1.instantiate()
    exe.launch(s)
    np.testing.assert_array_equal(out.to_numpy(stream=s), a + a)
    exe.update(build(db, db))
    exe.launch(s)
    np.testing.assert_array_equal(out.to_numpy(stream=s), b + b)
    kernel_node = [nd for nd in g1.nodes() if nd.kind == "kernel"][0]
    exe.set_enabled(kernel_node, False)
    exe.launch(s)
    np.testing.assert_array_equal(out.to_numpy(stream=s), np.zeros(n, np.float32))


@gpu
def test_pool_allocations_inside_a_capture(vadd):
    n = 10_000
    s = bc.Stream()
    a, b = fresh(n), fresh(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    out = bc.empty(n, "float32", stream=s)
    s.synchronize()
    with s.capture() as g:
        tmp = bc.empty(n, "float32", stream=s)               # a graph allocation node
        vadd.launch(blocks(n), 256, tmp, da, db, n, stream=s)
        vadd.launch(blocks(n), 256, out, tmp, db, n, stream=s)
        del tmp                                              # a graph free node
    g.keep_alive(da, db, out)
    exe = g.instantiate()
    for _ in range(2):
        exe.launch(s)
        np.testing.assert_array_equal(out.to_numpy(stream=s), (a + b) + b)


@gpu
def test_uncapturable_operation_leaves_the_stream_usable(vadd):
    s = bc.Stream()
    n = 1000
    a = fresh(n)
    da = bc.to_device(a, stream=s)
    out = bc.empty(n, "float32", stream=s)
    with pytest.raises(bc.CudaStreamCaptureError):
        with s.capture():
            vadd.launch(blocks(n), 256, out, da, da, n, stream=s)
            s.synchronize()
    assert not bc.is_capturing(s)
    vadd.launch(blocks(n), 256, out, da, da, n, stream=s)
    np.testing.assert_array_equal(out.to_numpy(stream=s), a + a)


LOOP_CU = r"""
#include <cuda_runtime.h>
// One pass of a WHILE body: add b to x, count the pass, end the loop after `limit` passes.
extern "C" __global__ void loop_step(cudaGraphConditionalHandle h, float *x, const float *b,
                                     unsigned int n, unsigned int *count, unsigned int limit) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b[i];
    if (i == 0) {
        unsigned int v = atomicAdd(count, 1u) + 1u;
        cudaGraphSetConditional(h, v < limit ? 1u : 0u);
    }
}
"""


def _build_loop_cubin(tmp_path):
    """Compile with relocatable device code and link cudadevrt (cudaGraphSetConditional
    lives there), giving a fully linked cubin the driver loads."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    major, minor = bc.Device(0).compute_capability
    arch = f"-arch=sm_{major}{minor}"
    src = tmp_path / "loop.cu"
    src.write_text(LOOP_CU)
    obj, cubin = tmp_path / "loop.o", tmp_path / "loop.cubin"
    subprocess.run(["nvcc", arch, "-rdc=true", "-c", str(src), "-o", str(obj)], check=True)
    subprocess.run(["nvcc", arch, "-dlink", "-cubin", str(obj), "-o", str(cubin), "-lcudadevrt"], check=True)
    return cubin.read_bytes()


@gpu
def test_while_loop_ended_by_a_kernel(tmp_path):
    if bc.driver_version() < (12, 4):
        pytest.skip("conditional nodes need a CUDA 12.4 driver")
    m = Module.from_cubin(_build_loop_cubin(tmp_path))
    step = m.get_kernel("loop_step", signature=("u64", "ptr", "ptr", "u32", "ptr", "u32"))
    n = 5000
    limit = int(RNG.integers(2, 12))
    s = bc.Stream()
    x0, b = fresh(n), fresh(n)
    dx, db = bc.to_device(x0, stream=s), bc.to_device(b, stream=s)
    count = bc.zeros(1, "uint32", stream=s)
    g = bc.Graph()
    cond = g.conditional_handle(default=1)
    reset = g.add_memset(count, 0, element_size=4)
    loop = g.add_while(cond, depends_on=reset)
    loop.bodies[0].add_kernel(step, blocks(n), 256, cond, dx, db, n, count, limit)
    exe = g.instantiate()
    exe.launch(s)
    got = dx.to_numpy(stream=s)
    assert int(count.to_numpy(stream=s)[0]) == limit
    expected = x0.copy()
    for _ in range(limit):
        expected += b
    np.testing.assert_array_equal(got, expected)


@gpu
def test_set_arg_and_launch_do_not_grow_the_heap(vadd):
    """Zero heap growth over 100,000 set_arg + launch rounds (tracemalloc and RSS)."""
    import resource
    n = 256
    s = bc.Stream()
    a, b = bc.to_device(fresh(n), stream=s), bc.to_device(fresh(n), stream=s)
    out = bc.empty(n, "float32", stream=s)
    g = bc.Graph()
    node = g.add_kernel(vadd, 1, 256, out, a, b, n)
    exe = g.instantiate()
    h = exe.kernel_node(node)
    for i in range(1000):
        h.set_arg(3, i % n)
        h.set_arg(1, a if i & 1 else b)
        exe.launch(s)
    s.synchronize()
    gc.collect()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    for i in range(100_000):
        h.set_arg(3, i % n)
        h.set_arg(1, a if i & 1 else b)
        exe.launch(s)
        if i % 4096 == 0:
            s.synchronize()
    s.synchronize()
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(d.size_diff for d in snap1.compare_to(snap0, "filename") if d.size_diff > 0)
    assert grown < 4096, grown
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert rss1 - rss0 < 8 * 1024, (rss0, rss1)   # KiB; tracemalloc's own snapshots included


@gpu
def test_decode_loop_example_runs():
    ex = os.path.join(REPO, "examples", "decode_loop.py")
    out = subprocess.run([sys.executable, ex, "--steps", "50"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "matches eager" in out.stdout


# Programmatic dependent launch and clusters in explicit graphs (sm_90): `producer` writes
# x = i + 1 and then lets dependents start; `consumer` runs its prologue before
# griddepcontrol.wait and reads x after it. `cluster_ids` records each block's cluster size
# and rank in it.
_PDL_SRC = r"""
extern "C" __global__ void producer(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)(i + 1);
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
extern "C" __global__ void consumer(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float k = 2.0f;                                          /* work before the wait */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (i < n) y[i] = k * x[i];
}
extern "C" __global__ void cluster_ids(int *out) {
    unsigned int r, s;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(s));
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = (int)s; out[2 * blockIdx.x + 1] = (int)r; }
}
"""


@pytest.fixture(scope="module")
def pdl_module():
    if bc.Device(0).compute_capability < (9, 0):
        pytest.skip("programmatic dependent launch and clusters need compute capability 9.0")
    return bc.Program(_PDL_SRC).compile().load()


@gpu
def test_configured_plans_in_an_explicit_graph_pdl_and_clusters(pdl_module):
    """add_plan of a programmatic_serialization plan after a kernel node makes a programmatic
    edge (the real driver's edges() says so, as it does for a captured PDL launch); the
    replayed chain gives numpy's result, many times over. A cluster plan's node launches
    in clusters: each block reads the cluster size and its rank from the hardware."""
    prod, cons, ids = (pdl_module.get_kernel(k) for k in ("producer", "consumer", "cluster_ids"))
    n = 1 << 20
    s = bc.Stream()
    x, y = bc.empty(n, "float32", stream=s), bc.empty(n, "float32", stream=s)
    pdl = bc.LaunchConfig(blocks(n), 256, programmatic_serialization=True)
    g = bc.Graph()
    k1 = g.add_kernel(prod, blocks(n), 256, x, n)
    k2 = g.add_plan(cons.bind_config(pdl, x, y, n), depends_on=k1)
    assert g.edges() == [(k1, k2, "programmatic")]
    nb = 64
    out = bc.zeros(2 * nb, "int32", stream=s)
    g.add_plan(ids.bind_config(bc.LaunchConfig(nb, 32, cluster=4), out))
    exe = g.instantiate()
    want = 2.0 * (np.arange(n, dtype=np.float32) + 1)
    for _ in range(10):                     # x and y zeroed before each replay: y comes from this one's x
        x.memset(0, stream=s)
        y.memset(0, stream=s)
        exe.launch(s)
        np.testing.assert_array_equal(y.to_numpy(stream=s), want)
    got = out.to_numpy(stream=s).reshape(nb, 2)
    np.testing.assert_array_equal(got[:, 0], np.full(nb, 4))
    np.testing.assert_array_equal(got[:, 1], np.arange(nb) % 4)
    with bc.capture(s) as cg:                                       # the driver's own PDL edge, for comparison
        prod.launch(blocks(n), 256, x, n, stream=s)
        cons.launch_config(bc.LaunchConfig(blocks(n), 256, stream=s, programmatic_serialization=True), x, y, n)
    assert [k for _, _, k in cg.edges()] == ["programmatic"]
