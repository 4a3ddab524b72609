"""Argument packing and launch validation against the fake driver (plans and batches:
test_plan.py; LaunchConfig: test_launch_config.py).

The fake driver records the exact parameter block each launch would hand the kernel
(it lays the parameters out from its own PTX parser). Every packing test compares
that block with an independent reference packer (``ref_pack`` in tests/_helpers.py,
written with ``struct``).
"""
import ctypes
import gc
import itertools
import math
import struct
import sys
import sysconfig
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import barecuda as bc
from barecuda import Module
import ptx
from _helpers import INT_RANGES, struct_type, ref_pack, no_launch

def ptx_for(name, types):
    decls = []
    for i, t in enumerate(types):
        if t.startswith("b8["):
            size, align = struct_type(t)
            decls.append(f"    .param .align {align} .b8 p{i}[{size}]")
        elif t == "ptr":
            decls.append(f"    .param .u64 .ptr .global .align 8 p{i}")
        else:
            decls.append(f"    .param .{t} p{i}")
    return (ptx.header() + "\n"
            f".visible .entry {name}(\n" + ",\n".join(decls) + "\n)\n{\n    ret;\n}\n")


def kernel_for(types, name="k"):
    return Module.from_ptx(ptx_for(name, types)).get_kernel(name)


@pytest.fixture(autouse=True)
def _collect():
    gc.collect()
    yield


# ------------------------------------------------------------------ layout
def test_layouts_match_hand_written_reference(fake, ptx):
    for text in (ptx.VADD, ptx.ALL_SCALARS, ptx.MIXED, ptx.STRUCT_PARAM, ptx.SIXTEEN_PARAMS,
                 ptx.NO_PARAMS, ptx.WITH_GLOBALS):
        mod = Module.from_ptx(text)
        for name in mod.kernel_names:
            k = mod.get_kernel(name)
            assert [(o, s) for o, s, _ in k.param_info()] == ptx.LAYOUTS[name], name
            assert k.num_params == len(ptx.LAYOUTS[name])
            assert k.param_bytes == ptx.PARAM_BYTES[name]


def test_layout_without_driver_param_info_uses_alignment_rules(fake, ptx):
    # cuFuncGetParamInfo failing (as on drivers < 12.4) falls back to the PTX types.
    fake.fail("cuFuncGetParamInfo", 801, times=-1)
    mod = Module.from_ptx(ptx.MIXED + ptx.STRUCT_PARAM.replace(ptx.HEADER, ""))
    for name in ("mixed", "with_struct"):
        k = mod.get_kernel(name)
        assert [(o, s) for o, s, _ in k.param_info()] == ptx.LAYOUTS[name]


# ------------------------------------------------------------------ packing
def test_mixed_byte_exact(fake, ptx):
    k = Module.from_ptx(ptx.MIXED).get_kernel("mixed")
    vals = [200, -1.25e-3, -7, 3.5, -12345, -(2**62) + 3, 0xDEADBEEF00]
    k.launch(1, 1, *vals)
    rec = fake.last_launch()
    assert rec.name == "mixed"
    assert rec.params == ref_pack(["u8", "f64", "s8", "f32", "s16", "s64", "ptr"], vals)


def test_all_scalars_at_min_and_max(fake, ptx):
    k = Module.from_ptx(ptx.ALL_SCALARS).get_kernel("scalars")
    types = ptx.ALL_SCALARS_TYPES
    for pick in (0, 1):
        vals = []
        for t in types:
            if t in INT_RANGES:
                vals.append(INT_RANGES[t][pick])
            elif t == "f16":
                vals.append((-65504.0, 65504.0)[pick])
            elif t == "f32":
                vals.append((-3.4028234663852886e38, 3.4028234663852886e38)[pick])
            else:
                vals.append((-sys.float_info.max, sys.float_info.max)[pick])
        k.launch(1, 1, *vals)
        assert fake.last_launch().params == ref_pack(types, vals)


SCALARS = ["u8", "s8", "u16", "s16", "b16", "f16", "u32", "s32", "b32", "f32",
           "u64", "s64", "b64", "f64", "ptr"]


@st.composite
def signature_and_values(draw):
    n = draw(st.integers(0, 24))
    types, vals = [], []
    for _ in range(n):
        if draw(st.integers(0, 9)) == 0:
            size = draw(st.integers(1, 40))
            align = draw(st.sampled_from([1, 2, 4, 8, 16]))
            t = f"b8[{size}]@{align}"
            v = draw(st.binary(min_size=size, max_size=size))
        else:
            t = draw(st.sampled_from(SCALARS))
            if t in INT_RANGES:
                lo, hi = INT_RANGES[t]
                v = draw(st.integers(lo, hi))
            elif t == "f16":
                v = draw(st.floats(width=16, allow_nan=False))
            elif t == "f32":
                v = draw(st.floats(width=32, allow_nan=False))
            else:
                v = draw(st.floats(allow_nan=False))
        types.append(t)
        vals.append(v)
    return types, vals


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sv=signature_and_values())
def test_random_signatures_pack_like_reference(fake, sv):
    types, vals = sv
    k = kernel_for(types)
    assert [t for t in k.signature] == [t.split("@")[0] for t in types]
    k.launch(1, 1, *vals)
    assert fake.last_launch().params == ref_pack(types, vals)
    plan = k.bind(1, 1, *vals)
    plan()
    assert fake.last_launch().params == ref_pack(types, vals)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=st.floats(allow_nan=False, allow_infinity=True))
def test_f16_rounds_like_numpy(fake, x):
    np = pytest.importorskip("numpy")
    k = kernel_for(["f16", "f32"])
    k.launch(1, 1, x, x)
    with np.errstate(over="ignore"):
        want = np.array([x]).astype(np.float16).tobytes() + b"\0\0" + np.array([x]).astype(np.float32).tobytes()
    assert fake.last_launch().params == want


def test_float_special_values(fake):
    k = kernel_for(["f16", "f32", "f64"])
    for x in (math.inf, -math.inf, 1e300, -1e300, 0.0, -0.0, 5e-324):
        k.launch(1, 1, x, x, x)
        p = fake.last_launch().params
        h, f, d = struct.unpack("<e2xfd", p)
        big = abs(x) > 70000
        assert (h == x) or (big and h == math.copysign(math.inf, x)) or (abs(x) < 1e-10 and h == 0)
        assert (f == x) or (big and abs(x) > 3.5e38 and f == math.copysign(math.inf, x)) or \
            (abs(x) < 1e-40 and f == 0)
        assert d == x
    k.launch(1, 1, math.nan, math.nan, math.nan)
    h, f, d = struct.unpack("<e2xfd", fake.last_launch().params)
    assert math.isnan(h) and math.isnan(f) and math.isnan(d)


def test_ints_and_bools_for_float_and_int_params(fake):
    k = kernel_for(["f32", "f64", "u8", "s32", "f16"])
    k.launch(1, 1, 3, -(2**70), True, False, 2)
    assert fake.last_launch().params == ref_pack(["f32", "f64", "u8", "s32", "f16"],
                                                 [3.0, float(-(2**70)), 1, 0, 2.0])


def test_int_subclasses_and_index_objects(fake):
    import enum

    class Color(enum.IntEnum):
        RED = 5

    class Idx:
        def __index__(self):
            return 77

    k = kernel_for(["u32", "s16"])
    k.launch(1, 1, Color.RED, Idx())
    assert fake.last_launch().params == ref_pack(["u32", "s16"], [5, 77])


# ------------------------------------------------------------ errors (no driver call)
@pytest.mark.parametrize("t", sorted(INT_RANGES))
def test_int_range_edges(fake, t):
    k = kernel_for(["u8", t])
    lo, hi = INT_RANGES[t]
    for ok in (lo, hi, 0, -1) if lo < 0 else (lo, hi, 0):
        k.launch(1, 1, 0, ok)
        assert fake.last_launch().params == ref_pack(["u8", t], [0, ok])
    for bad in (lo - 1, hi + 1, 2**200, -(2**200)):
        no_launch(fake, lambda: k.launch(1, 1, 0, bad), OverflowError, "argument 1", t, str(lo), str(hi))
        plan = k.bind(1, 1, 0, lo)
        no_launch(fake, lambda: plan.set_arg(1, bad), OverflowError, "argument 1")
        no_launch(fake, lambda: k.bind(1, 1, 0, bad), OverflowError, "argument 1")


def test_wrong_argument_count(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    for args in ((), (0, 0, 0), (0, 0, 0, 1, 2)):
        no_launch(fake, lambda: k.launch(1, 1, *args), TypeError, "vadd(u64, u64, u64, u32)",
                  f"got {len(args)}", "takes 4")
        no_launch(fake, lambda: k.bind(1, 1, *args), TypeError, "takes 4")


@pytest.mark.parametrize("t,bad", [
    ("u32", 1.5), ("u32", "3"), ("u32", None), ("s64", b"12345678"), ("ptr", 1.0), ("ptr", None),
    ("ptr", "0x10"), ("f32", "1.0"), ("f32", None), ("f64", object()), ("u8", [1]), ("b8[4]", 5),
    ("b8[4]", "abcd"), ("f16", True), ("u16", 2j)])
def test_wrong_types(fake, t, bad):
    k = kernel_for(["u8", t])
    e = no_launch(fake, lambda: k.launch(1, 1, 0, bad), TypeError, "argument 1", type(bad).__name__)
    assert t in str(e)


def test_device_buffer_is_not_a_scalar(fake):
    buf = bc.alloc(64)
    k = kernel_for(["f32"])
    no_launch(fake, lambda: k.launch(1, 1, buf), TypeError, "argument 0", "DeviceBuffer")


@pytest.mark.parametrize("grid,block,needle", [
    (0, 1, ">= 1"), (-1, 1, ">= 1"), (1, 0, ">= 1"), ((1, 0), 1, ">= 1"), ((1, 1, 1, 1), 1, "1 to 3"),
    ((), 1, "1 to 3"), (2**31, 1, "exceeds"), ((1, 65536), 1, "exceeds"), (1, 1025, "exceeds"),
    (1, (1, 1, 65), "exceeds"), (1, (32, 32, 2), "threads"), (2**64, 1, "exceeds")])
def test_bad_grid_and_block(fake, ptx, grid, block, needle):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    no_launch(fake, lambda: k.launch(grid, block, 0, 0, 0, 1), ValueError, needle)
    no_launch(fake, lambda: k.bind(grid, block, 0, 0, 0, 1), ValueError, needle)


def test_grid_block_types(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    no_launch(fake, lambda: k.launch("1", 1, 0, 0, 0, 1), TypeError, "grid")
    no_launch(fake, lambda: k.launch(1, 1.0, 0, 0, 0, 1), TypeError, "block")


def test_kernel_thread_limit(fake, ptx):
    k = Module.from_ptx(ptx.WITH_GLOBALS).get_kernel("first")   # .maxntid 256
    assert k.max_threads_per_block == 256
    no_launch(fake, lambda: k.launch(1, 512, 1), ValueError, "256")
    k.launch(1, 256, 1)


def test_shared_memory_limit(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    limit = k.max_dynamic_shared_memory
    assert limit > 0
    no_launch(fake, lambda: k.launch(1, 1, 0, 0, 0, 1, shared_mem=limit + 1), ValueError,
              "set_max_dynamic_shared_memory", str(limit))
    no_launch(fake, lambda: k.launch(1, 1, 0, 0, 0, 1, shared_mem=-1), ValueError, ">= 0")
    k.set_max_dynamic_shared_memory(limit + 4096)
    assert k.max_dynamic_shared_memory == limit + 4096
    k.launch(1, 1, 0, 0, 0, 1, shared_mem=limit + 1)
    assert fake.last_launch().shared == limit + 1


def test_launch_geometry_and_stream_recorded(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    s = bc.Stream()
    k.launch((2, 3, 4), (8, 4, 2), 1, 2, 3, 4, stream=s, shared_mem=128)
    rec = fake.last_launch()
    assert (rec.grid, rec.block, rec.shared, rec.stream, rec.kind) == ((2, 3, 4), (8, 4, 2), 128, s.handle_int,
                                                                       "kernel")
    k.launch([5], (7,), 1, 2, 3, 4)
    rec = fake.last_launch()
    assert (rec.grid, rec.block, rec.stream) == ((5, 1, 1), (7, 1, 1), 0)


def test_launch_call_forms(fake, ptx):
    """Kernel.launch's C entry takes positional grid/block/args with stream= and
    shared_mem=; every other spelling goes through Python's own argument parsing: each
    form must launch the same thing or raise the same error as a plain Python method."""
    import functools
    import inspect
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    s = bc.Stream()
    key = "".join(["str", "eam"])           # equal to "stream" but not the interned object
    forms = [
        lambda: k.launch((2, 3), 4, 1, 2, 3, 4, stream=s, shared_mem=16),
        lambda: k.launch((2, 3), 4, 1, 2, 3, 4, shared_mem=16, stream=s),
        lambda: k.launch((2, 3), 4, 1, 2, 3, 4, **{key: s, "shared_mem": 16}),
        lambda: k.launch(*((2, 3), 4, 1, 2, 3, 4), **{"stream": s, "shared_mem": 16}),
        lambda: bc.Kernel.launch(k, (2, 3), 4, 1, 2, 3, 4, stream=s, shared_mem=16),
        lambda: functools.partial(k.launch, (2, 3), 4)(1, 2, 3, 4, stream=s, shared_mem=16),
    ]
    for i, f in enumerate(forms):
        before = fake.launch_count()
        f()
        assert fake.launch_count() == before + 1, i
        rec = fake.last_launch()
        assert (rec.grid, rec.block, rec.shared, rec.stream) == ((2, 3, 1), (4, 1, 1), 16, s.handle_int), i
        assert rec.params == struct.pack("<QQQI", 1, 2, 3, 4), i
    k.launch(1, 1, 1, 2, 3, 4)
    assert (fake.last_launch().stream, fake.last_launch().shared) == (0, 0)
    # grid and block by keyword: the kernel takes no other argument then, so the count is wrong
    no_launch(fake, lambda: k.launch(grid=1, block=1, stream=s), TypeError, "takes 4 arguments, got 0")
    no_launch(fake, lambda: k.launch(1, 1, 1, 2, 3, 4, stram=s), TypeError, "launch() got an unexpected keyword")
    no_launch(fake, lambda: k.launch(1), TypeError, "launch() takes at least 2 positional arguments")
    no_launch(fake, lambda: k.launch(1, 1, 1, 2, 3), TypeError, "takes 4 arguments, got 3")
    no_launch(fake, lambda: k.launch(1, 1, 1, 2, 3, 4, stream=5.0), TypeError)
    with pytest.raises(TypeError):
        bc.Kernel.launch(object(), 1, 1)
    sig = inspect.signature(bc.Kernel.launch)
    assert list(sig.parameters) == ["self", "grid", "block", "args", "stream", "shared_mem"]
    assert sig.parameters["stream"].default is None and sig.parameters["shared_mem"].default == 0
    assert bc.Kernel.launch.__doc__.startswith("Launch the kernel.")


def test_driver_error_names_the_kernel(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    fake.fail("cuLaunchKernel", 701)
    with pytest.raises(bc.CudaLaunchError, match="vadd"):
        k.launch(1, 1, 0, 0, 0, 1)


# ------------------------------------------------------------ pointer-likes
def test_pointer_arguments(fake):
    np = pytest.importorskip("numpy")
    k = kernel_for(["ptr", "u64", "b64", "ptr"])
    buf = bc.to_device(np.arange(16, dtype=np.float32))
    p = buf.ptr

    class CAI:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (p + 8, False), "version": 3}

    class DL:
        def __dlpack__(self, *a, **kw):
            return buf.__dlpack__(*a, **kw)

        def __dlpack_device__(self):
            return buf.__dlpack_device__()

    k.launch(1, 1, buf, CAI(), DL(), 12345)
    assert fake.last_launch().params == struct.pack("<4Q", p, p + 8, p, 12345)
    # Empty the cell the local class closed over: on a free-threaded 3.13 its functions can
    # outlive gc.collect() once threads have run, and the leak check would count the buffer.
    del buf


def test_dlpack_from_cpu_is_refused(fake):
    np = pytest.importorskip("numpy")
    k = kernel_for(["ptr"])
    no_launch(fake, lambda: k.launch(1, 1, np.zeros(3)), TypeError, "argument 0")


# ------------------------------------------------------------ typed scalars
def test_numpy_scalars(fake):
    np = pytest.importorskip("numpy")
    types = ["u32", "u32", "f16", "f32", "f32", "s8", "u8", "u64", "f64"]
    k = kernel_for(types)
    k.launch(1, 1, np.int64(7), np.int32(-1), np.float16(1.5), np.float32(0.1), np.float64(0.1),
             np.int8(-5), np.bool_(True), np.uint64(2**64 - 1), np.float32(0.1))
    want = ref_pack(types, [7, 2**32 - 1, 1.5, float(np.float32(0.1)), float(np.float32(0.1)), -5, 1,
                            2**64 - 1, float(np.float32(0.1))])
    assert fake.last_launch().params == want
    no_launch(fake, lambda: k.launch(1, 1, np.float32(1), *([0] * 8)), TypeError, "argument 0", "float32")
    no_launch(fake, lambda: k.launch(1, 1, np.int64(2**40), *([0] * 8)), OverflowError, "argument 0")


def test_numpy_half_nan_payload_is_kept(fake):
    np = pytest.importorskip("numpy")
    k = kernel_for(["f16"])
    h = np.array([0x7d01], dtype=np.uint16).view(np.float16)[0]
    k.launch(1, 1, h)
    assert fake.last_launch().params == b"\x01\x7d"


def test_ctypes_scalars(fake):
    types = ["u32", "f32", "f32", "s8", "ptr", "s64"]
    k = kernel_for(types)
    k.launch(1, 1, ctypes.c_uint32(9), ctypes.c_float(2.5), ctypes.c_double(0.1), ctypes.c_int8(-3),
             ctypes.c_void_p(0x1000), ctypes.c_int16(-2))
    assert fake.last_launch().params == ref_pack(types, [9, 2.5, 0.1, -3, 0x1000, -2])
    no_launch(fake, lambda: k.launch(1, 1, ctypes.c_float(1), 0, 0, 0, 0, 0), TypeError, "argument 0")


# ------------------------------------------------------------ struct parameters
def test_struct_parameter(fake, ptx):
    k = Module.from_ptx(ptx.STRUCT_PARAM).get_kernel("with_struct")
    assert k.signature == ("u32", "b8[24]", "f32")
    raw = struct.pack("<di3f", 2.5, -4, 1.0, 2.0, 3.0)
    assert len(raw) == 24

    class S(ctypes.Structure):
        _fields_ = [("x", ctypes.c_double), ("y", ctypes.c_int), ("z", ctypes.c_float * 3)]

    want = ref_pack(["u32", "b8[24]@8", "f32"], [3, raw, 0.5])
    for s in (raw, bytearray(raw), memoryview(raw), S(2.5, -4, (1.0, 2.0, 3.0))):
        k.launch(1, 1, 3, s, 0.5)
        assert fake.last_launch().params == want
    np = pytest.importorskip("numpy")
    dt = np.dtype([("x", "<f8"), ("y", "<i4"), ("z", "<f4", (3,))])
    arr = np.array([(2.5, -4, (1.0, 2.0, 3.0))], dtype=dt)
    k.launch(1, 1, 3, arr[0], 0.5)
    assert fake.last_launch().params == want
    k.launch(1, 1, 3, arr, 0.5)
    assert fake.last_launch().params == want
    no_launch(fake, lambda: k.launch(1, 1, 3, raw[:20], 0.5), TypeError, "24 bytes", "argument 1")
    no_launch(fake, lambda: k.launch(1, 1, 3, 7, 0.5), TypeError, "argument 1")


def test_large_parameter_block_uses_heap_path(fake):
    types = [f"b8[1000]@8"] * 6 + ["u32"]       # 6004 bytes > the 4 KiB stack buffer
    vals = [bytes([i]) * 1000 for i in range(6)] + [42]
    k = kernel_for(types)
    k.launch(1, 1, *vals)
    assert fake.last_launch().params == ref_pack(types, vals)
    plan = k.bind(1, 1, *vals)
    plan()
    assert fake.last_launch().params == ref_pack(types, vals)


# ------------------------------------------------------------ module lifetime
def test_kernel_keeps_module_alive(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")      # no reference to the Module kept
    gc.collect()
    unloads = fake.calls("cuModuleUnload")
    live = fake.live("module")
    assert live >= 1
    k.launch(1, 1, 0, 0, 0, 1)
    assert fake.last_launch().name == "vadd"
    plan = k.bind(1, 1, 0, 0, 0, 2)
    del k
    gc.collect()
    assert fake.calls("cuModuleUnload") == unloads    # the plan holds the kernel holds the module
    plan()
    assert fake.last_launch().name == "vadd"
    del plan                                          # no cycle: refcounting unloads it at once
    assert fake.calls("cuModuleUnload") == unloads + 1
    assert fake.live("module") == live - 1


def test_closed_module_refuses_launches(fake, ptx):
    mod = Module.from_ptx(ptx.VADD)
    k = mod.get_kernel("vadd")
    plan = k.bind(1, 1, 0, 0, 0, 1)
    pl = bc.PlanList([plan])
    mod.close()
    assert k.handle_int == 0
    no_launch(fake, lambda: k.launch(1, 1, 0, 0, 0, 1), ValueError, "closed")
    no_launch(fake, plan, ValueError, "closed")
    no_launch(fake, pl, ValueError, "closed")
    no_launch(fake, lambda: bc.launch_all([plan]), ValueError, "closed")


# ------------------------------------------------------------ GIL switch
def test_gil_switch(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    old = bc._launch.set_launch_releases_gil(True)
    try:
        assert bc._launch.launch_releases_gil() is True
        k.launch(1, 1, 0, 0, 0, 9)
        assert fake.last_launch().params[-4:] == struct.pack("<I", 9)
        plan = k.bind(1, 1, 0, 0, 0, 10)
        bc.PlanList([plan])()
        assert fake.last_launch().params[-4:] == struct.pack("<I", 10)
    finally:
        bc._launch.set_launch_releases_gil(old)
    # A free-threaded build keeps the switch on (every launch takes the use counts).
    assert bc._launch.launch_releases_gil() is bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


# ------------------------------------------------------------ allocation checks
def _measured_loop(fn, n):
    """(traced bytes kept, traced peak, pymalloc blocks grown) over n calls of fn."""
    loop = itertools.repeat(None, n)       # created before measuring: the loop itself allocates nothing
    tracemalloc.start()
    try:
        blocks = sys.getallocatedblocks()
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in loop:
            fn()
        cur, peak = tracemalloc.get_traced_memory()
        grown = sys.getallocatedblocks() - blocks
        snap = tracemalloc.take_snapshot() if cur != base else None
    finally:
        tracemalloc.stop()
    if snap is not None:
        print("\n".join(str(x) for x in snap.statistics("traceback")[:5]))
    return cur - base, peak - base, grown


def _alloc_growth(fn, n=100_000):
    gc.collect()                   # (a full collection empties the free lists: do it before warming)
    gc.disable()
    try:
        # Warm caches and free lists (the *args tuple comes from one). More than 1024
        # calls: CPython 3.9 builds a code object's opcache on its 1024th call, and for
        # the lambdas below that allocates (and, having no LOAD_GLOBAL to cache, frees
        # at once) a one-byte-per-instruction map -- the 11-byte peak 3.9 showed here
        # with 1000 warm-up calls, once per process, never per launch.
        for _ in range(2048):
            fn()
            _noop()
        # The harness's own ints and tuples move sys.getallocatedblocks() by a block or
        # two, depending on the free lists earlier tests left (3.13: -2..+1, with a
        # no-op as well as with launches): one rehearsal absorbs one-time effects, and
        # the same loop over a no-op, measured just before, is the baseline. A
        # per-launch allocation still shows n times over (and in tracemalloc's figures).
        _measured_loop(fn, 1000)
        _, _, noop_grown = _measured_loop(_noop, n)
        cur, peak, grown = _measured_loop(fn, n)
        return cur, peak, grown - noop_grown
    finally:
        gc.enable()


def _noop():
    pass


def test_launches_allocate_nothing(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    buf = bc.alloc(4096)
    s = bc.Stream()
    launch = k.launch
    cur, peak, grown = _alloc_growth(lambda: launch(16, 256, buf, buf, buf, 4096, stream=s))
    assert (cur, grown) == (0, 0)
    assert peak == 0


def test_plans_and_batches_allocate_nothing(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    buf = bc.alloc(4096)
    plan = k.bind(16, 256, buf, buf, buf, 4096)
    assert _alloc_growth(plan) == (0, 0, 0)
    pl = bc.PlanList([plan] * 8)
    assert _alloc_growth(pl, n=20_000) == (0, 0, 0)
