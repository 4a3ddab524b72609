"""Argument packing, launch validation, LaunchConfig, plans and batches, against the fake driver.

The fake driver records the exact parameter block each launch would hand the kernel
(it lays the parameters out from its own PTX parser). Every packing test compares
that block with an independent reference packer written here with ``struct``.
"""
import ctypes
import gc
import itertools
import math
import struct
import sys
import sysconfig
import tracemalloc
import weakref

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import barecuda as bc
from barecuda import LaunchConfig, Module
import ptx

# ------------------------------------------------------------ reference packer
FMT = {"u8": "<B", "s8": "<b", "u16": "<H", "s16": "<h", "b16": "<H", "f16": "<e",
       "u32": "<I", "s32": "<i", "b32": "<I", "f32": "<f",
       "u64": "<Q", "s64": "<q", "b64": "<Q", "f64": "<d", "ptr": "<Q"}
# A PTX integer parameter has no signedness (nvcc declares C `int` as .u32), so
# every PTX integer type takes [-2**(n-1), 2**n - 1], stored as two's complement.
INT_RANGES = {t: (-2**(8 * n - 1), 2**(8 * n) - 1) for n, ts in
              ((1, ("u8", "s8")), (2, ("u16", "s16", "b16")), (4, ("u32", "s32", "b32")),
               (8, ("u64", "s64", "b64"))) for t in ts}
INT_RANGES["ptr"] = (0, 2**64 - 1)
# Explicit signature= entries stay strict.
STRICT_RANGES = {"u8": (0, 2**8 - 1), "s8": (-2**7, 2**7 - 1), "u16": (0, 2**16 - 1), "s16": (-2**15, 2**15 - 1),
                 "u32": (0, 2**32 - 1), "s32": (-2**31, 2**31 - 1), "u64": (0, 2**64 - 1),
                 "s64": (-2**63, 2**63 - 1), "ptr": (0, 2**64 - 1), "bool": (0, 1)}


def struct_type(t):
    """('b8[N]', N, align) parts of a struct type written 'b8[N]@A'."""
    body, _, align = t.partition("@")
    n = int(body[3:-1])
    return n, int(align or 1)


def ref_pack(types, values):
    """The CUDA parameter block: each parameter at the next multiple of its alignment."""
    buf = bytearray()
    for t, v in zip(types, values):
        if t.startswith("b8["):
            size, align = struct_type(t)
            data = bytes(v)
            assert len(data) == size
        else:
            fmt = FMT[t]
            size = align = struct.calcsize(fmt)
            if t in INT_RANGES and isinstance(v, int):
                v &= (1 << (8 * size)) - 1     # two's complement
                fmt = "<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[size]
            data = struct.pack(fmt, v)
        buf += b"\0" * (-len(buf) % align)
        buf += data
    return bytes(buf)


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
def no_launch(fake, fn, exc, *needles):
    before = fake.calls("cuLaunchKernel") + fake.calls("cuLaunchKernelEx")
    with pytest.raises(exc) as info:
        fn()
    assert fake.calls("cuLaunchKernel") + fake.calls("cuLaunchKernelEx") == before
    for n in needles:
        assert n in str(info.value), (n, str(info.value))
    return info.value


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


# ------------------------------------------------------------ plans
def test_plan_packs_like_launch_and_set_arg(fake, ptx):
    k = Module.from_ptx(ptx.MIXED).get_kernel("mixed")
    types = ["u8", "f64", "s8", "f32", "s16", "s64", "ptr"]
    vals = [1, 2.5, -3, 4.5, -5, 6, 7]
    s = bc.Stream()
    plan = k.bind((3, 2), 64, *vals, stream=s, shared_mem=256)
    assert plan.grid == (3, 2, 1) and plan.block == (64, 1, 1) and plan.shared_mem == 256
    before = fake.calls("cuLaunchKernel")
    plan()
    assert fake.calls("cuLaunchKernel") == before + 1
    rec = fake.last_launch()
    assert rec.params == ref_pack(types, vals)
    assert (rec.grid, rec.block, rec.shared, rec.stream) == ((3, 2, 1), (64, 1, 1), 256, s.handle_int)
    k.launch((3, 2), 64, *vals, stream=s, shared_mem=256)
    assert fake.last_launch().params == rec.params
    plan.set_arg(3, -0.25)
    plan.set_arg(-1, 0xABC)
    vals[3], vals[6] = -0.25, 0xABC
    plan.launch()
    assert fake.last_launch().params == ref_pack(types, vals)
    assert plan.args == tuple(vals)
    # a failed set_arg leaves the slot and the kept argument as they were
    with pytest.raises(OverflowError):
        plan.set_arg(0, 256)
    with pytest.raises(IndexError):
        plan.set_arg(7, 1)
    plan()
    assert fake.last_launch().params == ref_pack(types, vals)
    assert plan.args[0] == 1
    plan.stream = None
    plan()
    assert fake.last_launch().stream == 0


def test_plan_keeps_its_arguments_alive(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    buf = bc.alloc(64)
    s = bc.Stream()
    ref_buf = weakref.ref(buf)
    streams = sys.getrefcount(s)
    plan = k.bind(1, 1, buf, buf, buf, 16, stream=s)
    assert sys.getrefcount(s) == streams + 1
    del buf
    gc.collect()
    assert ref_buf() is not None
    plan()
    plan.set_arg(0, 0)
    plan.set_arg(1, 0)
    assert ref_buf() is not None
    plan.set_arg(2, 0)
    plan.stream = None
    gc.collect()
    assert ref_buf() is None
    assert sys.getrefcount(s) == streams


def test_launch_all_and_plan_list_in_order(fake, ptx):
    mod = Module.from_ptx(ptx.WITH_GLOBALS)
    first, second = mod.get_kernel("first"), mod.get_kernel("second")
    vadd = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    plans = [first.bind(1, 1, 11), second.bind(2, 1, 22, 3), vadd.bind(3, 1, 1, 2, 3, 4), first.bind(4, 1, 44)]
    for issue in (lambda: bc.launch_all(plans), lambda: bc.launch_all(tuple(plans)), bc.PlanList(plans)):
        n0 = fake.launch_count()
        issue()
        assert fake.launch_count() == n0 + 4
        got = [fake.last_launch(back) for back in (3, 2, 1, 0)]
        assert [g.name for g in got] == ["first", "second", "vadd", "first"]
        assert [g.grid[0] for g in got] == [1, 2, 3, 4]
        assert got[0].params == struct.pack("<I", 11) and got[3].params == struct.pack("<I", 44)
    pl = bc.PlanList(plans)
    assert len(pl) == 4 and pl[1] is plans[1] and list(pl) == plans
    plans[0].set_arg(0, 99)
    pl()
    assert fake.last_launch(3).params == struct.pack("<I", 99)
    no_launch(fake, lambda: bc.launch_all(plans + [object()]), TypeError, "item 4")
    with pytest.raises(TypeError, match="item 1"):
        bc.PlanList([plans[0], 5])


def test_batch_driver_error_names_the_plan(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    plans = [k.bind(1, 1, 0, 0, 0, i) for i in range(3)]
    fake.fail("cuLaunchKernel", 701, after=1)
    with pytest.raises(bc.CudaLaunchError, match="plan 1"):
        bc.PlanList(plans)()
    assert fake.last_launch().params[-4:] == struct.pack("<I", 0)


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


# ------------------------------------------------------------ LaunchConfig
def test_launch_config_attributes_recorded(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    s = bc.Stream()
    cfg = LaunchConfig((4, 2), (32, 2), shared_mem=64, stream=s, cluster=(2, 2), priority=-1,
                       programmatic_serialization=True)
    assert cfg.cluster == (2, 2, 1) and cfg.grid == (4, 2, 1)
    k.launch_config(cfg, 1, 2, 3, 4)
    rec = fake.last_launch()
    assert rec.kind == "ex"
    assert (rec.grid, rec.block, rec.shared, rec.stream) == ((4, 2, 1), (32, 2, 1), 64, s.handle_int)
    assert rec.cluster == (2, 2, 1) and rec.priority == -1 and rec.programmatic_serialization == 1
    assert not rec.cooperative and rec.num_attrs == 3
    assert rec.params == ref_pack(["u64", "u64", "u64", "u32"], [1, 2, 3, 4])
    plan = k.bind_config(cfg, 5, 6, 7, 8)
    plan()
    rec2 = fake.last_launch()
    assert rec2.kind == "ex" and rec2.cluster == (2, 2, 1) and rec2.params == ref_pack(
        ["u64", "u64", "u64", "u32"], [5, 6, 7, 8])
    bc.PlanList([plan, k.bind(1, 1, 0, 0, 0, 0)])()
    assert fake.last_launch(1).kind == "ex" and fake.last_launch(0).kind == "kernel"
    coop = LaunchConfig(2, 64, cooperative=True)
    k.launch_config(coop, 1, 2, 3, 4)
    rec = fake.last_launch()
    assert rec.cooperative and rec.num_attrs == 1 and rec.kind == "ex"


def test_cluster_validation(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    args = (0, 0, 0, 1)
    no_launch(fake, lambda: k.launch_config(LaunchConfig(3, 32, cluster=2), *args), ValueError, "divisible")
    no_launch(fake, lambda: k.launch_config(LaunchConfig(16, 32, cluster=16), *args), ValueError,
              "non_portable_cluster_size_allowed")
    k.set_attribute("non_portable_cluster_size_allowed", 1)
    no_launch(fake, lambda: k.launch_config(LaunchConfig(32, 32, cluster=32), *args), ValueError, "16")
    k.launch_config(LaunchConfig(16, 32, cluster=16), *args)
    assert fake.last_launch().cluster == (16, 1, 1)
    k2 = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    fake.set_attribute(0, 75, 8)     # compute capability 8.x: no clusters
    no_launch(fake, lambda: k2.launch_config(LaunchConfig(2, 32, cluster=2), *args), ValueError, "cluster")


def test_cooperative_validation(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    per_sm = k.max_active_blocks_per_sm(256)
    sms = bc.Device(0).attribute("multiprocessor_count")
    assert per_sm > 0 and sms > 0
    k.launch_config(LaunchConfig(per_sm * sms, 256, cooperative=True), 0, 0, 0, 1)
    no_launch(fake, lambda: k.launch_config(LaunchConfig(per_sm * sms + 1, 256, cooperative=True), 0, 0, 0, 1),
              ValueError, "co-residency", str(per_sm * sms))
    k2 = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    fake.set_attribute(0, 95, 0)
    no_launch(fake, lambda: k2.launch_config(LaunchConfig(1, 32, cooperative=True), 0, 0, 0, 1),
              ValueError, "cooperative")


def test_launch_config_argument_checks(fake):
    with pytest.raises(ValueError):
        LaunchConfig(0, 1)
    with pytest.raises(ValueError):
        LaunchConfig(1, (1, 1, 1, 1))
    with pytest.raises(ValueError):
        LaunchConfig(2, 1, cluster=0)
    with pytest.raises(TypeError):
        LaunchConfig(1, 1, stream="nope")
    assert "cooperative=True" in repr(LaunchConfig(1, 1, cooperative=True))


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


def _pending_lib(fake):
    lib = fake.lib
    for name, res, args in [("fakecuda_pending_mode", ctypes.c_int, [ctypes.c_int]),
                            ("fakecuda_early_frees", ctypes.c_longlong, [])]:
        getattr(lib, name).restype = res
        getattr(lib, name).argtypes = args
    return lib


@pytest.mark.parametrize("how", ["bind", "set_arg"])
def test_plan_defers_the_free_of_a_closed_argument(fake, ptx, how):
    # a.close() while a plan holds a: the plan's later launches still get allocated
    # memory (the double counts a free that queued work still uses); the free runs
    # when the plan goes.
    lib = _pending_lib(fake)
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    s = bc.Stream()
    gc.collect()
    mem0 = fake.live("mem")
    early0 = lib.fakecuda_early_frees()
    lib.fakecuda_pending_mode(1)
    try:
        a = bc.empty(64, "float32", allocator=bc.DriverAllocator())
        other = bc.empty(64, "float32", allocator=bc.DriverAllocator())
        if how == "bind":
            plan = k.bind(1, 32, a, a, a, 16, stream=s)
        else:
            plan = k.bind(1, 32, other, other, other, 16, stream=s)
            for i in range(3):
                plan.set_arg(i, a)
        plan()
        a.close()
        assert a.is_closed
        with pytest.raises(ValueError, match="closed"):
            k.launch(1, 32, a, a, a, 16, stream=s)      # the closed handle itself is refused
        assert fake.live("mem") == mem0 + 2              # ...but its memory is still allocated
        plan()
        plan()
        assert lib.fakecuda_early_frees() == early0
        del plan
        gc.collect()
        s.synchronize()
        bc.Device(0).synchronize()
        gc.collect()
        assert lib.fakecuda_early_frees() == early0
        assert fake.live("mem") == mem0 + 1              # freed once the plan went; `other` remains
    finally:
        lib.fakecuda_pending_mode(0)
    del other
    gc.collect()
    assert fake.live("mem") == mem0


def test_set_arg_unpins_what_it_replaces(fake, ptx):
    k = Module.from_ptx(ptx.VADD).get_kernel("vadd")
    gc.collect()
    mem0 = fake.live("mem")
    a, b = bc.empty(64, "float32", allocator=bc.DriverAllocator()), bc.empty(64, "float32", allocator=bc.DriverAllocator())
    plan = k.bind(1, 32, a, a, b, 16)
    plan.set_arg(0, b)
    plan.set_arg(1, 0)            # a no longer used by the plan: its close frees at once
    a.close()
    assert fake.live("mem") == mem0 + 1
    b.close()                     # b still used by the plan: deferred
    assert fake.live("mem") == mem0 + 1
    plan()
    del plan
    gc.collect()
    assert fake.live("mem") == mem0
