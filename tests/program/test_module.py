"""Module loading, JIT options and logs, the PTX signature parser, kernels' attributes and
globals, and lifetimes, against the fake driver (the parser tests need no driver)."""
import gc
import struct
import warnings

import pytest

import barecuda as bc
from barecuda import CudaInvalidPtxError, CudaNotFoundError, CudaWarning, Module
from barecuda._module import parse_ptx_signatures


@pytest.fixture(autouse=True)
def _collect():
    gc.collect()
    yield


# ------------------------------------------------------------ PTX parser (no driver)
def test_parser_fixtures(ptx):
    for text in (ptx.VADD, ptx.ALL_SCALARS, ptx.MIXED, ptx.STRUCT_PARAM, ptx.SIXTEEN_PARAMS,
                 ptx.NO_PARAMS, ptx.WITH_GLOBALS):
        for name, params in parse_ptx_signatures(text).items():
            assert [s for _, s, _ in params] == [s for _, s in ptx.LAYOUTS[name]], name
    sig = parse_ptx_signatures(ptx.ALL_SCALARS)["scalars"]
    assert [t for t, _, _ in sig] == ptx.ALL_SCALARS_TYPES
    assert parse_ptx_signatures(ptx.MIXED)["mixed"][-1] == ("ptr", 8, 8)
    assert parse_ptx_signatures(ptx.STRUCT_PARAM)["with_struct"] == [("u32", 4, 4), ("b8[24]", 24, 8),
                                                                     ("f32", 4, 4)]


def test_parser_syntax_variants():
    text = """
    .version 8.0
    .target sm_90
    .address_size 64
    // .visible .entry commented_out(.param .u32 x)
    /* .entry also_commented(
         .param .u64 y) */
    .func helper(.param .u32 z) { ret; }
    .weak .entry weak_one(.param .f64 d) { ret; }
    .entry bare { ret; }
    .visible .entry empty_parens ( ) { ret; }
    .visible .entry _Z6kernelPfS_i(
        .param .u64 _Z6kernelPfS_i_param_0,   // trailing comment
        .param .u64 .ptr .global .align 16 _Z6kernelPfS_i_param_1,
        .param
            .s32
            _Z6kernelPfS_i_param_2
    )
    .maxntid 128, 1, 1
    { ret; }
    .entry arrays(.param .align 16 .b8 s[48], .param .u32 v[4], .param .b8 raw[3], .param .f16x2 h2,
                  .param .b64 .ptr .align 8 q)
    { ret; }
    """
    sigs = parse_ptx_signatures(text)
    assert list(sigs) == ["weak_one", "bare", "empty_parens", "_Z6kernelPfS_i", "arrays"]
    assert sigs["weak_one"] == [("f64", 8, 8)]
    assert sigs["bare"] == [] and sigs["empty_parens"] == []
    assert sigs["_Z6kernelPfS_i"] == [("u64", 8, 8), ("ptr", 8, 8), ("s32", 4, 4)]
    assert sigs["arrays"] == [("b8[48]", 48, 16), ("u32[4]", 16, 4), ("b8[3]", 3, 1), ("f16x2", 4, 4),
                              ("ptr", 8, 8)]
    assert parse_ptx_signatures(text.encode()) == sigs


def test_parser_rejects_garbage():
    with pytest.raises(ValueError, match="k"):
        parse_ptx_signatures(".entry k(.param x)")


# ------------------------------------------------------------ loading
def test_from_ptx_text_and_bytes(fake, ptx):
    for src in (ptx.VADD, ptx.VADD.encode()):
        m = Module.from_ptx(src)
        assert m.kind == "ptx" and m.kernel_names == ("vadd",)
        assert "fakecuda" in m.info_log and isinstance(m.error_log, str)
        assert m.handle_int != 0 and not m.is_closed
        assert "vadd" in repr(m)


def test_jit_options_validated(fake, ptx):
    m = Module.from_ptx(ptx.VADD, options={"opt_level": 3, "max_registers": 64, "target": "sm_90",
                                           "generate_line_info": True, "log_verbose": True,
                                           "generate_debug_info": False, "threads_per_block": 128})
    assert m.kernel_names == ("vadd",)
    Module.from_ptx(ptx.VADD, options={"target": 90})
    Module.from_ptx(ptx.VADD, options={"target": (9, 0)})
    loads = fake.calls("cuModuleLoadDataEx")
    for bad, exc in (({"opt_level": 5}, ValueError), ({"max_registers": 0}, ValueError),
                     ({"nonsense": 1}, ValueError), ({"target": "sm_x"}, ValueError), ([1], TypeError)):
        with pytest.raises(exc):
            Module.from_ptx(ptx.VADD, options=bad)
    assert fake.calls("cuModuleLoadDataEx") == loads


def test_invalid_ptx_raises_with_log(fake, ptx):
    live = fake.live("module")
    with pytest.raises(CudaInvalidPtxError) as info:
        Module.from_ptx(ptx.INVALID)
    msg = str(info.value)
    assert "cuModuleLoadDataEx" in msg and "JIT error log" in msg and "PTX rejected on request" in msg
    assert info.value.code == 218
    assert fake.live("module") == live


def test_load_failure_leaves_nothing(fake, ptx):
    live = fake.live("module")
    fake.fail("cuModuleLoadDataEx", 218)
    with pytest.raises(CudaInvalidPtxError):
        Module.from_ptx(ptx.VADD)
    assert fake.live("module") == live
    fake.fail("cuModuleLoadDataEx", 2)
    with pytest.raises(bc.CudaOutOfMemoryError):
        Module.from_ptx(ptx.VADD)
    assert fake.live("module") == live


def test_not_an_image(fake):
    with pytest.raises(bc.CudaInvalidImageError, match="neither PTX"):
        Module.from_cubin(b"garbage\0")


def test_load_from_files(fake, ptx, tmp_path):
    files = {"a.ptx": ptx.VADD.encode(), "b.cubin": ptx.fake_cubin(ptx.MIXED),
             "c.fatbin": ptx.fake_fatbin(ptx.STRUCT_PARAM), "noext": ptx.VADD.encode()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert Module.load(tmp_path / "a.ptx").kind == "ptx"
    assert Module.load(str(tmp_path / "noext")).kernel_names == ("vadd",)
    cub = Module.load(tmp_path / "b.cubin")
    assert cub.kind == "cubin" and cub.kernel_names is None
    fat = Module.load(tmp_path / "c.fatbin")
    assert fat.kind == "fatbin"
    assert fat.get_kernel("with_struct").num_params == 3
    with pytest.raises(FileNotFoundError):
        Module.load(tmp_path / "missing.ptx")


def test_cubin_kernels_pack_by_size_or_signature(fake, ptx):
    m = Module.from_cubin(ptx.fake_cubin(ptx.MIXED))
    k = m.get_kernel("mixed")
    assert k.signature == ("b8", "b64", "b8", "b32", "b16", "b64", "b64")
    # width-only slots: ints of either sign, floats only as scalars of the slot's exact width
    import ctypes
    k.launch(1, 1, 200, ctypes.c_double(1.5), -1, ctypes.c_float(2.5), -2, -3, 4)
    assert fake.last_launch().params == struct.pack("<B7xdbxxxfh6xqQ", 200, 1.5, -1, 2.5, -2, -3, 4)
    typed = m.get_kernel("mixed", signature=("u8", "float64", "int8", "f32", "i16", "s64", "ptr"))
    assert typed is m.get_kernel("mixed", signature=("u8", "float64", "int8", "f32", "i16", "s64", "ptr"))
    assert typed.signature == ("u8", "f64", "s8", "f32", "s16", "s64", "ptr")
    with pytest.raises(OverflowError):
        typed.launch(1, 1, 256, 1.5, -1, 2.5, -2, -3, 4)
    with pytest.raises(ValueError, match="driver reports"):
        m.get_kernel("mixed", signature=("u32", "f64", "s8", "f32", "s16", "s64", "ptr"))
    with pytest.raises(ValueError, match="7"):
        m.get_kernel("mixed", signature=("u8",))
    with pytest.raises(ValueError, match="unknown parameter type"):
        m.get_kernel("mixed", signature=("u8", "quad", "s8", "f32", "s16", "s64", "ptr"))


def test_signature_forms(fake, ptx):
    import ctypes
    np = pytest.importorskip("numpy")
    m = Module.from_ptx(ptx.STRUCT_PARAM)

    class S(ctypes.Structure):
        _fields_ = [("x", ctypes.c_double), ("y", ctypes.c_int), ("z", ctypes.c_float * 3)]

    for sig in (("u32", "b8[24]", "f32"), (np.uint32, 24, np.float32), (ctypes.c_uint32, S, ctypes.c_float),
                ("uint32", ("bytes", 24, 8), np.dtype("float32"))):
        k = m.get_kernel("with_struct", signature=sig)
        assert k.signature == ("u32", "b8[24]", "f32"), sig
    # the layout still comes from the driver
    assert [o for o, _, _ in k.param_info()] == [0, 8, 32]


def test_get_kernel_caching_and_not_found(fake, ptx):
    m = Module.from_ptx(ptx.WITH_GLOBALS)
    assert m.get_kernel("first") is m.get_kernel("first")
    with pytest.raises(CudaNotFoundError) as info:
        m.get_kernel("thrid")
    assert "thrid" in str(info.value) and "first, second" in str(info.value)
    with pytest.raises(TypeError):
        m.get_kernel(b"first")
    with pytest.raises(TypeError):
        bc.Kernel()
    with pytest.raises(TypeError):
        Module()


# ------------------------------------------------------------ kernel attributes
def test_kernel_attributes_and_occupancy(fake, ptx):
    k = Module.from_ptx(ptx.WITH_GLOBALS).get_kernel("first")
    assert k.attribute("max_threads_per_block") == 256
    assert k.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES") == 4096
    attrs = k.attributes()
    assert attrs["max_threads_per_block"] == 256 and "num_regs" in attrs and len(attrs) == 16
    with pytest.raises(ValueError, match="unknown function attribute"):
        k.attribute("bogus")
    assert k.max_active_blocks_per_sm(128) > 0
    min_grid, block = k.suggested_block_size()
    assert min_grid > 0 and 0 < block <= 256
    assert k.handle_int != 0
    old = k.max_dynamic_shared_memory
    k.set_max_dynamic_shared_memory(old + 1024)
    assert k.attribute("max_dynamic_shared_size_bytes") == old + 1024 == k.max_dynamic_shared_memory
    with pytest.raises(bc.CudaInvalidValueError):
        k.set_max_dynamic_shared_memory(10**9)
    assert k.max_dynamic_shared_memory == old + 1024
    assert repr(k) == "<barecuda.Kernel first(u32)>"


# ------------------------------------------------------------ globals
def test_globals_read_write(fake, ptx):
    m = Module.from_ptx(ptx.WITH_GLOBALS)
    g = m.get_global("counter")
    assert g.nbytes == 4 and g.ptr != 0 and int(g) == g.ptr and len(g) == 4
    assert struct.unpack("<I", g.read()) == (7,)
    g.write(struct.pack("<I", 123456))
    assert struct.unpack("<I", g.read()) == (123456,)
    t = m.get_global("table")
    assert t.nbytes == ptx.GLOBALS["table"]
    data = struct.pack("<16f", *[i * 0.5 for i in range(16)])
    t.write(data)
    assert t.read() == data
    t.write(b"\1\2\3\4", offset=60)
    assert t.read()[60:] == b"\1\2\3\4"
    with pytest.raises(ValueError):
        t.write(b"x" * 65)
    assert struct.unpack("<4d", m.get_global("coeffs").read()) == (1.0, 2.5, -3.0, 4.0)
    cai = t.__cuda_array_interface__
    assert cai["data"][0] == t.ptr and cai["shape"] == (64,)
    with pytest.raises(CudaNotFoundError, match="nope"):
        m.get_global("nope")


# ------------------------------------------------------------ lifetimes
def test_dealloc_unloads(fake, ptx):
    live = fake.live("module")
    m = Module.from_ptx(ptx.VADD)
    assert fake.live("module") == live + 1
    g = m.get_global  # bound method keeps it alive
    del m
    assert fake.live("module") == live + 1
    del g
    assert fake.live("module") == live


def test_global_keeps_module_alive(fake, ptx):
    live = fake.live("module")
    g = Module.from_ptx(ptx.WITH_GLOBALS).get_global("counter")
    assert fake.live("module") == live + 1
    assert struct.unpack("<I", g.read()) == (7,)
    del g
    assert fake.live("module") == live


def test_close_is_idempotent_and_final(fake, ptx):
    live = fake.live("module")
    with Module.from_ptx(ptx.VADD) as m:
        k = m.get_kernel("vadd")
        assert fake.live("module") == live + 1
    assert m.is_closed and fake.live("module") == live
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.get_kernel("vadd")
    with pytest.raises(ValueError, match="closed"):
        k.attributes()
    del m, k
    assert fake.live("module") == live


def test_dealloc_failure_becomes_warning(fake, ptx):
    m = Module.from_ptx(ptx.VADD)
    fake.fail("cuModuleUnload", 400)
    with pytest.warns(CudaWarning, match="cuModuleUnload"):
        del m
        gc.collect()


def test_wrong_argument_types_raise_type_errors(fake, ptx):
    m = bc.Module.from_ptx(ptx.WITH_GLOBALS)
    with pytest.raises(TypeError):
        m.get_global(123)
    with pytest.raises(TypeError):
        bc.as_device_buffer({})


def test_a_constant_whose_size_overflows_does_not_crash_the_double(fake, ptx):
    """The double parsed `.const .b8 c[2**62][4]` into a wrapped size (more sizes:
    tests/core/test_checked_sizes.py); the module either loads without it or is refused."""
    try:
        m = bc.Module.from_ptx(ptx.HUGE_CONST)
    except bc.CudaError:
        return
    with pytest.raises(bc.CudaError):
        m.get_global("c")
