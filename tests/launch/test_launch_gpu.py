"""Modules and launches on a real GPU (``pytest --gpu``), checked against numpy on fresh
random data. The PTX is hand-written (tests/ptx/gpu.py); nvcc-built cubin/fatbin
tests run only where nvcc is installed.
"""
import os
import shutil
import struct
import subprocess

import pytest

from ptx import gpu as P

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import LaunchConfig, Module
from _helpers import join_all

gpu = pytest.mark.gpu
RNG = np.random.default_rng()


# ----------------------------------------------------------- no GPU needed
@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
@pytest.mark.parametrize("name", sorted(P.ALL))
def test_ptx_kernels_assemble(name, tmp_path):
    """The PTX the GPU tests use is valid (checked offline with ptxas)."""
    src = tmp_path / f"{name}.ptx"
    src.write_text(P.ALL[name])
    out = subprocess.run(["ptxas", "-arch=sm_90", str(src), "-o", os.devnull], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# ----------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def vadd():
    return Module.from_ptx(P.VADD).get_kernel("vadd")


def fresh_f32(n):
    return RNG.standard_normal(n).astype(np.float32)


# ----------------------------------------------------------- vector add
@gpu
@pytest.mark.parametrize("n", [1, 7, 1000003, 2**24 + 17])
def test_vadd_matches_numpy(vadd, n):
    s = bc.Stream()
    a, b = fresh_f32(n), fresh_f32(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    out = bc.empty(n, "float32", stream=s)
    vadd.launch((n + 255) // 256, 256, out, da, db, n, stream=s)
    got = out.to_numpy(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(got, a + b)


@gpu
def test_vadd_default_stream_and_tuple_dims(vadd):
    n = 4099
    a, b = fresh_f32(n), fresh_f32(n)
    da, db = bc.to_device(a), bc.to_device(b)
    out = bc.empty(n, "float32")
    vadd.launch(((n + 127) // 128, 1, 1), (128,), out, da, db, n)
    np.testing.assert_array_equal(out.to_numpy(), a + b)


# ----------------------------------------------------------- scalar round trips
INT_TYPES = {"u8": np.uint8, "s8": np.int8, "u16": np.uint16, "s16": np.int16, "u32": np.uint32,
             "s32": np.int32, "u64": np.uint64, "s64": np.int64}
FLOAT_TYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _echo(t, value):
    k = Module.from_ptx(P.echo(t)).get_kernel(f"echo_{t}")
    out = bc.zeros(8, "uint8")
    k.launch(1, 1, out, value)
    return out.to_numpy()[:P.SIZES[t]].tobytes()


@gpu
@pytest.mark.parametrize("t", sorted(INT_TYPES))
def test_int_round_trip(t):
    dt = INT_TYPES[t]
    info = np.iinfo(dt)
    values = [int(info.min), int(info.max), 0, 1] + [int(v) for v in RNG.integers(info.min, info.max, 4,
                                                                                    dtype=dt, endpoint=True)]
    if info.min < 0:
        values.append(-1)
    for v in values:
        assert _echo(t, v) == np.array([v], dtype=dt).tobytes(), (t, v)
        assert _echo(t, dt(v)) == np.array([v], dtype=dt).tobytes(), (t, v)   # numpy scalar


@gpu
@pytest.mark.parametrize("t", sorted(FLOAT_TYPES))
def test_float_round_trip(t):
    dt = FLOAT_TYPES[t]
    fi = np.finfo(dt)
    values = [0.0, -0.0, 1.0, -1.0, float(fi.max), float(fi.min), float(fi.tiny), np.inf, -np.inf, np.nan]
    values += [float(v) for v in RNG.standard_normal(4) * 100]
    for v in values:
        want = np.array([v]).astype(dt).tobytes()
        got = _echo(t, v)
        if np.isnan(v):
            assert np.isnan(np.frombuffer(got, dt)[0]), t
        else:
            assert got == want, (t, v, got, want)
        assert _echo(t, dt(v)) == want or np.isnan(v)        # numpy scalar: raw bytes


@gpu
def test_float16_rounding_on_device():
    xs = RNG.standard_normal(64) * 1000
    for x in xs:
        assert _echo("f16", float(x)) == np.float16(x).tobytes()


@gpu
def test_bool_and_untyped_round_trip():
    assert _echo("u8", True) == b"\x01" and _echo("u8", False) == b"\x00"
    assert _echo("b32", -1) == b"\xff" * 4 and _echo("b32", 1.5) == np.float32(1.5).tobytes()
    assert _echo("b64", 2.25) == np.float64(2.25).tobytes()
    assert _echo("b16", 0xABCD) == struct.pack("<H", 0xABCD)


@gpu
def test_struct_parameter():
    k = Module.from_ptx(P.STRUCT_ECHO).get_kernel("struct_echo")
    raw = struct.pack("<di3f", float(RNG.standard_normal()), int(RNG.integers(-1000, 1000)),
                      *[float(v) for v in RNG.standard_normal(3).astype(np.float32)])
    out = bc.zeros(24, "uint8")
    k.launch(1, 1, out, raw)
    assert out.to_numpy().tobytes() == raw


@gpu
def test_sixteen_arguments():
    k = Module.from_ptx(P.SIXTEEN).get_kernel("sixteen")
    assert k.num_params == 16
    fs = [float(v) for v in RNG.standard_normal(7).astype(np.float32)]
    us = [int(v) for v in RNG.integers(0, 2**32, 8, dtype=np.uint64)]
    out = bc.zeros(15, "uint32")
    k.launch(1, 1, out, *fs, *us)
    got = out.to_numpy().tobytes()
    assert got == struct.pack("<7f8I", *fs, *us)


# ----------------------------------------------------------- errors
@gpu
def test_invalid_ptx_has_log():
    with pytest.raises(bc.CudaInvalidPtxError) as info:
        Module.from_ptx(P.INVALID)
    assert "JIT error log" in str(info.value)
    assert len(str(info.value).split("JIT error log:", 1)[1].strip()) > 0


@gpu
def test_bad_configs_raise_before_the_driver(vadd):
    buf = bc.empty(16, "float32")
    dev = bc.Device()
    cases = [
        ((0, 1), ValueError), ((1, 0), ValueError), ((1, dev.attribute("max_threads_per_block") + 1), ValueError),
        ((dev.attribute("max_grid_dim_x") + 1, 1), ValueError), (((1, 65536), 1), ValueError),
    ]
    for (g, b), exc in cases:
        with pytest.raises(exc):
            vadd.launch(g, b, buf, buf, buf, 16)
    with pytest.raises(ValueError, match="set_max_dynamic_shared_memory"):
        vadd.launch(1, 1, buf, buf, buf, 16, shared_mem=vadd.max_dynamic_shared_memory + 1)
    # n is a PTX .u32: any value in [-2**31, 2**32 - 1] packs (two's complement,
    # issue 10); one past either end is refused before the driver.
    for bad in (2**32, -2**31 - 1):
        with pytest.raises(OverflowError):
            vadd.launch(1, 1, buf, buf, buf, bad)
    with pytest.raises(TypeError):
        vadd.launch(1, 1, buf, buf, 16)


@gpu
def test_dynamic_shared_memory():
    k = Module.from_ptx(P.SAXPY_SHARED).get_kernel("saxpy_shared")
    n = 100003
    a, y = fresh_f32(n), fresh_f32(n)
    x = np.float32(RNG.standard_normal())
    out = bc.empty(n, "float32")
    k.launch((n + 255) // 256, 256, out, bc.to_device(a), bc.to_device(y), float(x), n, shared_mem=256 * 4)
    np.testing.assert_allclose(out.to_numpy(), x * a + y, rtol=1e-6, atol=1e-6)
    optin = bc.Device().attribute("max_shared_memory_per_block_optin")
    k.set_max_dynamic_shared_memory(optin)
    k.launch((n + 255) // 256, 256, out, bc.to_device(a), bc.to_device(y), float(x), n, shared_mem=optin)
    np.testing.assert_allclose(out.to_numpy(), x * a + y, rtol=1e-6, atol=1e-6)


@gpu
def test_launch_call_forms_on_device():
    """Kernel.launch's C entry and its fallback (keywords in another order, a keyword
    string that is not the interned one, ** and * unpacking) launch the same kernel with
    the same stream and shared memory: each result against numpy on fresh data."""
    import functools
    k = Module.from_ptx(P.SAXPY_SHARED).get_kernel("saxpy_shared")
    n = 70001
    s = bc.Stream()
    key = "".join(["shared", "_mem"])
    g, b = (n + 255) // 256, 256
    forms = [
        lambda *a: k.launch(g, b, *a, stream=s, shared_mem=b * 4),
        lambda *a: k.launch(g, b, *a, shared_mem=b * 4, stream=s),
        lambda *a: k.launch(g, b, *a, **{"stream": s, key: b * 4}),
        lambda *a: bc.Kernel.launch(k, g, b, *a, stream=s, shared_mem=b * 4),
        lambda *a: functools.partial(k.launch, g, b)(*a, stream=s, shared_mem=b * 4),
    ]
    for f in forms:
        a, y = fresh_f32(n), fresh_f32(n)
        x = np.float32(RNG.standard_normal())
        out = bc.zeros(n, "float32", stream=s)
        f(out, bc.to_device(a, stream=s), bc.to_device(y, stream=s), float(x), n)
        got = out.to_numpy(stream=s)
        s.synchronize()
        np.testing.assert_allclose(got, x * a + y, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------- globals, occupancy
@gpu
def test_global_read_write():
    m = Module.from_ptx(P.GLOBAL_BUMP)
    g = m.get_global("gcounter")
    assert g.nbytes == 4
    start = int(RNG.integers(0, 2**31))
    g.write(struct.pack("<I", start))
    k = m.get_kernel("bump")
    k.launch(1, 1, 5)
    k.launch(1, 1, 7)
    bc.Device().synchronize()
    assert struct.unpack("<I", g.read()) == (start + 12,)


@gpu
def test_occupancy_is_sane(vadd):
    assert 0 < vadd.max_active_blocks_per_sm(256) <= bc.Device().attribute("max_blocks_per_multiprocessor")
    min_grid, block = vadd.suggested_block_size()
    assert min_grid > 0 and 0 < block <= 1024
    attrs = vadd.attributes()
    assert attrs["max_threads_per_block"] > 0 and attrs["num_regs"] > 0


# ----------------------------------------------------------- nvcc-built modules
@gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("kind", ["cubin", "fatbin"])
def test_nvcc_cubin_and_fatbin(kind, tmp_path):
    major, minor = bc.Device().compute_capability
    src = tmp_path / "k.cu"
    src.write_text(P.CUDA_C)
    out = tmp_path / f"k.{kind}"
    subprocess.run(["nvcc", f"--{kind}", f"-arch=sm_{major}{minor}", str(src), "-o", str(out)], check=True)
    m = Module.load(out)
    assert m.kind == kind
    k = m.get_kernel("scale", signature=("ptr", "ptr", "f32", "u32"))
    n = 5001
    a = fresh_f32(n)
    d = bc.empty(n, "float32")
    k.launch((n + 127) // 128, 128, d, bc.to_device(a), 2.5, n)
    np.testing.assert_array_equal(d.to_numpy(), a * np.float32(2.5))
    g = m.get_global("dev_value")
    assert struct.unpack("<i", g.read()) == (5,)
    # without a signature (driver 12.4+): sizes from cuFuncGetParamInfo
    if bc.driver_version() >= (12, 4):
        untyped = m.get_kernel("scale")
        assert [s for _, s, _ in untyped.param_info()] == [8, 8, 4, 4]
        # an untyped 4-byte slot takes a 4-byte numpy scalar bit for bit (a Python
        # float's width would be a guess: refused, issue 13)
        s = np.float32(RNG.standard_normal())
        untyped.launch((n + 127) // 128, 128, d, bc.to_device(a), s, n)
        np.testing.assert_array_equal(d.to_numpy(), a * s)
        with pytest.raises(TypeError, match="signature="):
            untyped.launch((n + 127) // 128, 128, d, bc.to_device(a), 0.5, n)


# ----------------------------------------------------------- plans and batches
@gpu
def test_plans_and_batches(vadd):
    n = 300007
    s = bc.Stream()
    a, b = fresh_f32(n), fresh_f32(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    o1, o2 = bc.empty(n, "float32", stream=s), bc.empty(n, "float32", stream=s)
    grid = (n + 255) // 256
    p1 = vadd.bind(grid, 256, o1, da, db, n, stream=s)
    p2 = vadd.bind(grid, 256, o2, o1, db, n, stream=s)       # o2 = a + 2b, ordered after p1
    p1()
    p2()
    s.synchronize()
    np.testing.assert_array_equal(o2.to_numpy(), (a + b) + b)
    p2.set_arg(1, da)                                        # o2 = a + b
    bc.launch_all([p1, p2])
    s.synchronize()
    np.testing.assert_array_equal(o2.to_numpy(), a + b)
    p2.set_arg(1, o2)                                        # o2 += b, 10 times
    batch = bc.PlanList([p2] * 10)
    batch()
    s.synchronize()
    want = a + b
    for _ in range(10):
        want = want + b
    np.testing.assert_array_equal(o2.to_numpy(), want)


# ----------------------------------------------------------- LaunchConfig
@gpu
def test_cluster_rank():
    dev = bc.Device()
    if dev.compute_capability < (9, 0):
        pytest.skip("thread block clusters need compute capability 9.0")
    k = Module.from_ptx(P.CLUSTER_RANK).get_kernel("cluster_rank")
    for cx in (2, 4):
        nblocks = 64
        out = bc.zeros(nblocks, "uint32")
        k.launch_config(LaunchConfig(nblocks, 32, cluster=(cx, 1, 1)), out)
        np.testing.assert_array_equal(out.to_numpy(), np.arange(nblocks, dtype=np.uint32) % cx)
    with pytest.raises(ValueError, match="divisible"):
        k.launch_config(LaunchConfig(3, 32, cluster=2), out)


@gpu
def test_cooperative_grid_sync():
    dev = bc.Device()
    if not dev.attribute("cooperative_launch"):
        pytest.skip("device has no cooperative launch")
    k = Module.from_ptx(P.GRID_SYNC).get_kernel("grid_sync")
    block = 128
    nblocks = k.max_active_blocks_per_sm(block) * dev.attribute("multiprocessor_count")
    assert nblocks > 0
    first, second = bc.zeros(nblocks, "uint32"), bc.zeros(nblocks, "uint32")
    counter = bc.zeros(1, "uint32")
    s = bc.Stream()
    k.launch_config(LaunchConfig(nblocks, block, stream=s, cooperative=True), first, second, counter)
    s.synchronize(timeout=60)     # blocks that are not co-resident would spin forever: fail, not hang
    got = second.to_numpy()
    idx = np.arange(nblocks, dtype=np.uint32)
    np.testing.assert_array_equal(first.to_numpy(), idx + 1)
    np.testing.assert_array_equal(got, (idx + 1) % nblocks + 1)
    with pytest.raises(ValueError, match="co-residency"):
        k.launch_config(LaunchConfig(nblocks + 1, block, cooperative=True), first, second, counter)


@gpu
def test_priority_and_programmatic_serialization(vadd):
    n = 65537
    s = bc.Stream()
    a, b = fresh_f32(n), fresh_f32(n)
    da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
    out = bc.empty(n, "float32", stream=s)
    least, greatest = bc.Device().stream_priority_range()
    grid = (n + 255) // 256
    vadd.launch_config(LaunchConfig(grid, 256, stream=s, priority=greatest), out, da, db, n)
    vadd.launch_config(LaunchConfig(grid, 256, stream=s, programmatic_serialization=True), out, out, db, n)
    plan = vadd.bind_config(LaunchConfig(grid, 256, stream=s, priority=least, programmatic_serialization=True),
                            out, out, db, n)
    plan()
    got = out.to_numpy(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(got, ((a + b) + b) + b)


@gpu
def test_gil_released_launches_from_threads(vadd):
    import threading
    old = bc._launch.set_launch_releases_gil(True)
    try:
        n = 100003
        results = {}

        def work(i):
            s = bc.Stream()
            a, b = fresh_f32(n), fresh_f32(n)
            out = bc.empty(n, "float32", stream=s)
            da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
            for _ in range(50):
                vadd.launch((n + 255) // 256, 256, out, da, db, n, stream=s)
            results[i] = (out.to_numpy(stream=s), a + b)

        ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
        for t in ts:
            t.start()
        join_all(ts, timeout=120)
        for got, want in results.values():
            np.testing.assert_array_equal(got, want)
        assert len(results) == 4
    finally:
        bc._launch.set_launch_releases_gil(old)
