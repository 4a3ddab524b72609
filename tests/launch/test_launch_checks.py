"""Launch validation against the driver double: checked 64-bit geometry arithmetic, the
stream= argument, 'Fix:' diagnostics with the launch geometry, and occupancy queries."""
import ctypes
import gc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import barecuda as bc
from barecuda import LaunchConfig, Module
from _helpers import no_launch  # noqa: E402

BIG = [2**31, 2**32, 2**63, 2**64]


@pytest.fixture(autouse=True)
def _collect():
    gc.collect()
    yield


ARGS = (0, 0, 0, 1)


# ------------------------------------------------------------ 64-bit arithmetic
def test_cooperative_block_count_does_not_wrap(fake, vadd):
    # 2**20 * 2**12 blocks is 2**32: a 32-bit product wraps to 0 and would pass
    no_launch(fake, lambda: vadd.launch_config(LaunchConfig((2**20, 2**12, 1), 32, cooperative=True), *ARGS),
              ValueError, "co-residency", str(2**32))
    no_launch(fake, lambda: vadd.launch_config(LaunchConfig((2**20, 2**11, 2), 32, cooperative=True), *ARGS),
              ValueError, "co-residency")


def test_cluster_size_does_not_wrap(fake, vadd):
    # 2**30 * 4 blocks per cluster is 2**32: a 32-bit product wraps to 0
    no_launch(fake, lambda: vadd.launch_config(LaunchConfig((2**30, 4, 1), 32, cluster=(2**30, 4, 1)), *ARGS),
              ValueError, str(2**32))
    no_launch(fake, lambda: vadd.launch_config(LaunchConfig((2**16, 2**16, 1), 32, cluster=(2**16, 2**16, 1)),
                                               *ARGS), ValueError, "blocks")


@pytest.mark.parametrize("v", BIG)
def test_huge_dimensions(fake, vadd, v):
    for grid, block in (((v, 1, 1), 1), ((1, v, 1), 1), ((1, 1, v), 1), (1, (v, 1, 1)), (1, (1, 1, v)), (v, 1)):
        no_launch(fake, lambda: vadd.launch(grid, block, *ARGS), ValueError, "exceeds")
        no_launch(fake, lambda: vadd.bind(grid, block, *ARGS), ValueError, "exceeds")
    if v < 2**32:       # representable: refused against the device, not parsed away
        no_launch(fake, lambda: vadd.launch_config(LaunchConfig(v, 1), *ARGS), ValueError, "exceeds")
        no_launch(fake, lambda: vadd.launch_config(LaunchConfig(1, 1, cluster=v), *ARGS), ValueError)
    else:
        for kw in ({"grid": v, "block": 1}, {"grid": 1, "block": v}, {"grid": 1, "block": 1, "cluster": v},
                   {"grid": 1, "block": 1, "shared_mem": v}):
            with pytest.raises(ValueError):
                LaunchConfig(**kw)
    no_launch(fake, lambda: vadd.launch(1, 1, *ARGS, shared_mem=v), ValueError, "shared_mem")


# ------------------------------------------------------------ stream=
def test_stream_argument_types(fake, vadd):
    buf = bc.zeros(16)
    for bad in (buf, vadd, "0", 1.0, object(), True, -1):
        exc = ValueError if bad == -1 and bad is not True else TypeError
        no_launch(fake, lambda: vadd.launch(1, 1, *ARGS, stream=bad), exc, "stream")
        no_launch(fake, lambda: vadd.bind(1, 1, *ARGS, stream=bad), exc, "stream")
        with pytest.raises(exc, match="stream"):
            LaunchConfig(1, 1, stream=bad)
    s = bc.Stream()
    vadd.launch(1, 1, *ARGS, stream=s)
    assert fake.last_launch().stream == s.handle_int

    class Proto:
        def __cuda_stream__(self):
            return (0, s.handle_int)

    vadd.launch(1, 1, *ARGS, stream=Proto())
    assert fake.last_launch().stream == s.handle_int
    vadd.launch(1, 1, *ARGS, stream=s.handle_int)
    assert fake.last_launch().stream == s.handle_int
    vadd.launch(1, 1, *ARGS, stream=None)
    assert fake.last_launch().stream == 0
    s.close()


def test_foreign_stream_objects_are_read_once(fake, vadd):
    """A __cuda_stream__ object passed on every launch is asked once; a new object at a
    dead one's address is asked again; objects without weak references every time."""
    streams = [bc.Stream() for _ in range(3)]
    asked = []

    class Proto:
        def __init__(self, s):
            self.s = s

        def __cuda_stream__(self):
            asked.append(self)
            return (0, self.s.handle_int)

    p = Proto(streams[0])
    for _ in range(3):
        vadd.launch(1, 1, *ARGS, stream=p)
        assert fake.last_launch().stream == streams[0].handle_int
    assert asked == [p]
    for i in range(40):        # fresh objects (often at a freed one's address): each its own handle
        q = Proto(streams[i % 3])
        vadd.launch(1, 1, *ARGS, stream=q)
        assert fake.last_launch().stream == streams[i % 3].handle_int
        del q
        gc.collect()

    class NoWeak:
        __slots__ = ("h",)

        def __init__(self, h):
            self.h = h

        def __cuda_stream__(self):
            asked.append(self)
            return (0, self.h)
    n = len(asked)
    w = NoWeak(streams[1].handle_int)
    vadd.launch(1, 1, *ARGS, stream=w)
    vadd.launch(1, 1, *ARGS, stream=w)
    assert len(asked) == n + 2 and fake.last_launch().stream == streams[1].handle_int
    # Empty the cell the local classes closed over: on a free-threaded 3.13 their functions can
    # outlive gc.collect() once threads have run, and the leak check would count the streams
    # the recorded Proto objects hold.
    del asked


def test_closed_stream_is_refused(fake, vadd):
    s = bc.Stream()
    plan = vadd.bind(1, 1, *ARGS, stream=s)
    s.close()
    no_launch(fake, lambda: vadd.launch(1, 1, *ARGS, stream=s), ValueError, "closed")
    no_launch(fake, lambda: vadd.bind(1, 1, *ARGS, stream=s), ValueError, "closed")
    with pytest.raises(ValueError, match="closed"):
        plan.stream = s
    vadd.launch(1, 1, *ARGS, stream=bc.Stream.default())      # the legacy stream is not closed


@pytest.mark.parametrize("releases_gil", [False, True], ids=["gil_held", "gil_released"])
@pytest.mark.parametrize("how", ["bind", "bind_config", "config_launch"])
def test_plan_whose_stream_was_closed_is_refused(fake, vadd, how, releases_gil):
    """A plan (or a LaunchConfig) made before its stream was closed never names the
    destroyed handle: calling it, batching it or repointing an argument raises, in the
    same words whether launches release the GIL or not (a free-threaded build always does)."""
    old = bc.set_launch_releases_gil(releases_gil)
    try:
        _closed_stream_plan_checks(fake, vadd, how)
    finally:
        bc.set_launch_releases_gil(old)


def _closed_stream_plan_checks(fake, vadd, how):
    s = bc.Stream()
    cfg = LaunchConfig(1, 1, stream=s)
    plan = vadd.bind(1, 1, *ARGS, stream=s) if how == "bind" else vadd.bind_config(cfg, *ARGS)
    plans = bc.PlanList([plan])
    plan()
    s.close()
    if how == "config_launch":
        no_launch(fake, lambda: vadd.launch_config(cfg, *ARGS), ValueError, "closed")
    no_launch(fake, plan, ValueError, "stream is closed")
    no_launch(fake, plan.launch, ValueError, "stream is closed")
    no_launch(fake, lambda: bc.launch_all([plan]), ValueError, "plan 0: its stream is closed")
    no_launch(fake, plans, ValueError, "plan 0: its stream is closed")
    with pytest.raises(ValueError, match="stream is closed"):
        plan.set_arg(0, 0)
    plan.stream = None                                        # moved to a live stream: works again
    plan()
    plans()
    assert fake.last_launch().stream == 0


# ------------------------------------------------------------ diagnostics
def test_errors_name_the_geometry_and_a_fix(fake, vadd):
    e = no_launch(fake, lambda: vadd.launch((4, 2), (1, 1, 65), *ARGS, shared_mem=16), ValueError,
                  "grid=(4, 2, 1)", "block=(1, 1, 65)", "shared_mem=16", "Fix:")
    no_launch(fake, lambda: vadd.launch(2, (32, 32, 2), *ARGS), ValueError, "grid=(2, 1, 1)",
              "block=(32, 32, 2)", "Fix:")
    no_launch(fake, lambda: vadd.launch(2, 32, *ARGS, shared_mem=10**7), ValueError, "shared_mem=10000000",
              "Fix:", "set_max_dynamic_shared_memory")
    fake.fail("cuLaunchKernel", 719)
    with pytest.raises(bc.CudaError) as info:
        vadd.launch((3, 2), 64, *ARGS, shared_mem=8)
    assert "grid=(3, 2, 1)" in str(info.value) and "block=(64, 1, 1)" in str(info.value)
    assert "shared_mem=8" in str(info.value)
    assert e is not None


# ------------------------------------------------------------ occupancy
def test_suggested_block_size_with_a_smem_function(fake, vadd):
    seen = []

    def per_block(b):
        seen.append(b)
        return 4 * b

    fixed = vadd.suggested_block_size(0)
    grid, block = vadd.suggested_block_size(per_block)
    assert seen and block in seen and block > 0 and grid > 0
    assert all(b > 0 for b in seen)
    assert vadd.suggested_block_size(lambda b: 0) == fixed

    class Boom(Exception):
        pass

    def bad(b):
        raise Boom(b)

    with pytest.raises(Boom):
        vadd.suggested_block_size(bad)
    with pytest.raises(ValueError, match="returned -1"):
        vadd.suggested_block_size(lambda b: -1)
    with pytest.raises(TypeError):
        vadd.suggested_block_size(lambda b: "x")
    assert vadd.suggested_block_size(0) == fixed          # nothing left behind


def test_max_active_clusters(fake, vadd):
    n1 = vadd.max_active_clusters(LaunchConfig(16, 128, cluster=2))
    n2 = vadd.max_active_clusters(LaunchConfig(16, 128, cluster=4))
    assert n1 > 0 and n2 > 0 and n1 >= n2
    with pytest.raises(ValueError, match="cluster"):
        vadd.max_active_clusters(LaunchConfig(16, 128))


def test_public_gil_setting(fake, vadd):
    old = bc.set_launch_releases_gil(True)
    try:
        assert bc.launch_releases_gil() is True
        vadd.launch(1, 1, *ARGS)
    finally:
        bc.set_launch_releases_gil(old)
    assert bc.launch_releases_gil() == old


def test_closed_buffer_is_refused(fake, vadd):
    a = bc.zeros(64)
    a.close()
    no_launch(fake, lambda: vadd.launch(1, 1, a, 0, 0, 1), ValueError, "closed")
    no_launch(fake, lambda: vadd.bind(1, 1, a, 0, 0, 1), ValueError, "closed")


# ================================================== closed objects are refused before the driver
def _driver_calls(fake):
    return sum(fake.calls(n) for n in ("cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyAsync", "cuMemcpyDtoDAsync",
                                       "cuMemsetD8Async", "cuStreamSynchronize"))


def test_closed_buffer_is_refused_before_the_driver(fake, vadd):
    """A closed DeviceBuffer used to pack as pointer 0; now every use raises first."""
    b = bc.alloc(1024)
    ok = bc.alloc(1024)
    b.close()
    n = _driver_calls(fake)
    for use in (lambda: vadd.launch(1, 32, b, ok, ok, 1), lambda: vadd.bind(1, 32, ok, b, ok, 1),
                lambda: vadd.bind(1, 32, ok, ok, ok, 1).set_arg(2, b), lambda: ok.copy_from(b),
                lambda: b.copy_from(ok), lambda: b.memset(0), lambda: b.view(), lambda: b[0:4],
                lambda: b.__dlpack__(), lambda: b.__cuda_array_interface__, lambda: int(b)):
        with pytest.raises(ValueError, match="closed"):
            use()
    assert _driver_calls(fake) == n


def test_closed_stream_is_refused_before_the_driver(fake, vadd):
    """A closed Stream passed as stream= used to launch on the legacy default stream."""
    s = bc.Stream()
    s.close()
    b = bc.alloc(1024)
    n = _driver_calls(fake)
    for use in (lambda: vadd.launch(1, 32, b, b, b, 1, stream=s), lambda: vadd.bind(1, 32, b, b, b, 1, stream=s),
                lambda: b.memset(0, stream=s), lambda: b.copy_from(bytes(1024), stream=s),
                lambda: bc.alloc(16, stream=s), lambda: b.copy(stream=s)):
        with pytest.raises(ValueError, match="closed"):
            use()
    assert _driver_calls(fake) == n


def test_pred_takes_only_0_and_1(fake, ptx):
    np = pytest.importorskip("numpy")
    k = bc.Module.from_ptx(ptx.PRED_PARAM).get_kernel("k")
    n = fake.launch_count()
    for bad in (np.int8(5), np.uint8(255), ctypes.c_uint8(7), 2):
        with pytest.raises(OverflowError):
            k.launch(1, 1, bad)
    assert fake.launch_count() == n
    k.launch(1, 1, np.uint8(1))
    assert fake.last_launch().params == b"\x01"


# ------------------------------------------------------------ the geometry fast path
_DIM = st.one_of(st.integers(-2, 2**32 + 1), st.sampled_from([1, 2, 64, 65, 1024, 1025, 65535, 65536, 2**31 - 1, 2**31]))
_GEOM = st.one_of(_DIM, st.tuples(_DIM), st.tuples(_DIM, _DIM), st.tuples(_DIM, _DIM, _DIM))


def _outcome(fake, f):
    n0 = fake.launch_count()
    try:
        f()
    except (ValueError, TypeError, OverflowError) as e:
        assert fake.launch_count() == n0
        return type(e).__name__
    rec = fake.last_launch()
    return rec.grid, rec.block, rec.shared


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(grid=_GEOM, block=_GEOM, smem=st.sampled_from([0, 16, 48 * 1024, 48 * 1024 + 1, -1]))
def test_int_and_tuple_geometry_fast_path_agrees_with_the_checked_path(fake, vadd, grid, block, smem):
    """launch() takes ints and tuples of ints through a fast path (no parse_dims, no
    check_limits); the same geometry given as lists goes through the checked path. Both
    launch the same grid/block/shared memory, or raise the same exception type before any
    launch, for any mix of valid and out-of-range dimensions."""
    as_list = (lambda d: list(d) if isinstance(d, tuple) else [d])
    fast = _outcome(fake, lambda: vadd.launch(grid, block, *ARGS, shared_mem=smem))
    checked = _outcome(fake, lambda: vadd.launch(as_list(grid), as_list(block), *ARGS, shared_mem=smem))
    assert fast == checked
