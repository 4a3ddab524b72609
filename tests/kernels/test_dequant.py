"""GGUF block formats (csrc/quant.cuh) and the dequantize op (csrc/dequant.cu).

CPU: the block structs compile and match gguf's GGML_QUANT_SIZES (NVRTC static_asserts
fed with gguf's numbers); dequant.cu compiles with real NVRTC for sm_80/sm_90 with no
warnings; QuantWeight's and dequantize's checks raise before any launch on the driver
double; a launch's geometry and parameters.
GPU (--gpu): every format against ``gguf.quants.dequantize`` on fresh random blocks
(Q4_K max error < 1e-4 in float32), odd shapes and block counts that leave a partial
segment and a tensor end inside a 16-byte chunk; the plan form inside a captured graph.
"""
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _args as A
from barecuda.kernels import _dequant as D
from barecuda.kernels import _registry

gguf = pytest.importorskip("gguf")

from _quant_helpers import (QFORMATS, from_dev, lowered_ptx_get, random_blocks,  # noqa: E402
                            reference, rounding)

gpu = pytest.mark.gpu


# ------------------------------------------------------------------ CPU: layouts, compile
def test_formats_table_matches_gguf():
    for fmt in QFORMATS + ["f32", "f16", "bf16"]:
        name, t, qk, nb = D.format_info(fmt)
        gt = gguf.GGMLQuantizationType(t)
        assert gguf.GGML_QUANT_SIZES[gt] == (qk, nb), fmt
        assert gt.name.lower() == name
        assert D.format_info(gt) == (name, t, qk, nb)
        assert D.format_info(fmt.upper()) == (name, t, qk, nb)
    assert D.format_info("float16")[0] == "f16"
    with pytest.raises(ValueError, match="not supported"):
        D.format_info("q5_k")
    with pytest.raises(ValueError, match="ggml type 13"):
        D.format_info(13)
    with pytest.raises(TypeError):
        D.format_info(1.5)


def test_block_structs_match_gguf_sizes():
    """quant.cuh's structs, compiled by NVRTC, have gguf's sizes and the format codes are
    ggml's type numbers (static_asserts against values taken from the gguf package)."""
    Q = gguf.GGMLQuantizationType
    checks = []
    for struct_name, code_macro, t in (("bq4_0", "BC_Q4_0", Q.Q4_0), ("bq4_1", "BC_Q4_1", Q.Q4_1),
                                       ("bq8_0", "BC_Q8_0", Q.Q8_0), ("bq4_K", "BC_Q4_K", Q.Q4_K),
                                       ("bq6_K", "BC_Q6_K", Q.Q6_K)):
        qk, nb = gguf.GGML_QUANT_SIZES[t]
        checks.append(f"static_assert(sizeof({struct_name}) == {nb}, \"{struct_name} size\");")
        checks.append(f"static_assert({code_macro} == {int(t)}, \"{code_macro}\");")
        checks.append(f"static_assert(BcQ<{code_macro}>::BYTES == {nb} && BcQ<{code_macro}>::QK == {qk}, \"{code_macro} traits\");")
        checks.append(f"static_assert(BcQ<{code_macro}>::UNITS * 32 == {qk}, \"units\");")
    src = '#include "quant.cuh"\n' + "\n".join(checks) + '\nextern "C" __global__ void k() {}\n'
    prog = bc.Program(src, name="layout_check.cu", include_paths=[_registry.CSRC], options=list(_registry.OPTIONS))
    oc = prog.compile("ptx", arch="compute_80", cache=False)
    assert oc.log.strip() == ""
    # the negative: a wrong size is caught
    bad = '#include "quant.cuh"\nstatic_assert(sizeof(bq6_K) == 208, "x");\n'
    with pytest.raises(bc.CompileError):
        bc.Program(bad, name="bad.cu", include_paths=[_registry.CSRC],
                   options=list(_registry.OPTIONS)).compile("ptx", arch="compute_80", cache=False)


HOST_SHIM = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
typedef uint8_t u8; typedef uint16_t u16; typedef uint32_t u32; typedef uint64_t u64; typedef int8_t i8;
#define BC_DEV inline
#define __align__(n) alignas(n)
struct uint4 { u32 x, y, z, w; };
struct uint2 { u32 x, y; };
static inline uint4 make_uint4(u32 x, u32 y, u32 z, u32 w) { return {x, y, z, w}; }
static inline float __uint_as_float(u32 v) { float f; std::memcpy(&f, &v, 4); return f; }
static inline u32 __funnelshift_r(u32 lo, u32 hi, u32 sh) { sh &= 31; return sh ? (lo >> sh) | (hi << (32 - sh)) : lo; }
static inline float bc_half_to_float(u16 h) {
    const u32 s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? std::ldexp((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
"""
HOST_MAIN = r"""
#include "quant.cuh"
#include "dequant_direct.cuh"
#include <cstdio>
#include <vector>
static int g_parts = 0;                 // 0: unit(), 1: part(), 2: dequant_direct.cuh's dq_part(), 3: its DqRaw,
                                        // 4: its DqQ6Quad (Q6_K)
template <int F> static void run(const u8* q, long nblocks, float* y) {
    using Q = BcQ<F>;
    for (long b = 0; b < nblocks; ++b) {
        if constexpr (F == BC_Q6_K) {
            if (g_parts == 4) {
                for (int h = 0; h < 2; ++h)
                    for (int oq = 0; oq < 4; ++oq) {
                        DqQ6Quad r;
                        r.load(q + b * Q::BYTES, h, oq);
                        for (int qt = 0; qt < 4; ++qt) {
                            float v[8], a, c;
                            r.decode(qt, v, a, c);
                            for (int i = 0; i < 8; ++i) y[b * Q::QK + (16 * h + 4 * qt + oq) * 8 + i] = std::fma(a, v[i], c);
                        }
                    }
                continue;
            }
        }
        if (g_parts) {
            for (int p = 0; p < Q::QK / 8; ++p) {
                float v[8], a, c;
                if (g_parts == 2) dq_part<F>(q + b * Q::BYTES, p, v, a, c);
                else if (g_parts == 3) {
                    if constexpr (F != BC_Q4_K) { DqRaw<F> r; r.load(q + b * Q::BYTES, p); r.decode(p, v, a, c); }
                    else Q::part(q + b * Q::BYTES, p, v, a, c);
                } else Q::part(q + b * Q::BYTES, p, v, a, c);
                for (int i = 0; i < 8; ++i) y[b * Q::QK + p * 8 + i] = std::fma(a, v[i], c);
            }
            continue;
        }
        for (int u = 0; u < Q::UNITS; ++u) {
            float v[32], a[2], c[2];
            Q::unit(q + b * Q::BYTES, u, v, a, c);
            for (int i = 0; i < 32; ++i) y[b * Q::QK + u * 32 + i] = std::fma(a[i >> 4], v[i], c[i >> 4]);
        }
    }
}
int main(int argc, char** argv) {   // fmt-code in-file nbytes out-file unit|part|direct|raw
    const int f = atoi(argv[1]);
    g_parts = argc > 5 && argv[5][0] == 'p' ? 1 : argc > 5 && argv[5][0] == 'd' ? 2 : argc > 5 && argv[5][0] == 'r' ? 3
            : argc > 5 && argv[5][0] == 'q' ? 4 : 0;
    const long n = atol(argv[3]);
    std::vector<u8> buf(n + 64);            // 16-byte aligned start (new[]), padded for the funnel reads
    FILE* fi = fopen(argv[2], "rb");
    if (fread(buf.data(), 1, n, fi) != (size_t)n) return 2;
    fclose(fi);
    std::vector<float> y;
    #define RUN(F) { y.resize(n / BcQ<F>::BYTES * BcQ<F>::QK); run<F>(buf.data(), n / BcQ<F>::BYTES, y.data()); }
    switch (f) {
        case BC_Q4_0: RUN(BC_Q4_0) break;
        case BC_Q4_1: RUN(BC_Q4_1) break;
        case BC_Q8_0: RUN(BC_Q8_0) break;
        case BC_Q4_K: RUN(BC_Q4_K) break;
        case BC_Q6_K: RUN(BC_Q6_K) break;
        default: return 3;
    }
    FILE* fo = fopen(argv[4], "wb");
    fwrite(y.data(), sizeof(float), y.size(), fo);
    fclose(fo);
    return 0;
}
"""


def test_decoders_compiled_for_the_host_match_gguf(tmp_path):
    """quant.cuh's decoders (unit() and part(): the code every quant kernel runs) and the direct
    dequantize kernel's (dequant_direct.cuh), compiled for the CPU with
    a few shims for CUDA intrinsics, reproduce gguf.quants.dequantize bit for bit in float32
    on random blocks of every format (both 2-byte alignments of the odd-sized blocks); Q6_K's
    quad decoder (DqQ6Quad, dequant.cu's DQ6_Q) too."""
    import shutil
    import subprocess
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "shim.h").write_text(HOST_SHIM)
    (tmp_path / "main.cpp").write_text(HOST_MAIN)
    exe = tmp_path / "decode"
    subprocess.run([cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-DBCQ_HOST", "-include", str(tmp_path / "shim.h"),
                    "-I", _registry.CSRC, str(tmp_path / "main.cpp"), "-o", str(exe)], check=True)
    rng = np.random.default_rng()
    for fmt in QFORMATS:
        _, t, qk, nb = D.format_info(fmt)
        raw = random_blocks(rng, fmt, qk * 37)
        (tmp_path / "in.bin").write_bytes(raw.tobytes())
        ref = reference(raw, fmt, (raw.size // nb * qk,))
        for mode in ("unit", "part", "direct", "raw") + (("quad",) if fmt == "q6_k" else ()):
            subprocess.run([str(exe), str(t), str(tmp_path / "in.bin"), str(raw.size), str(tmp_path / "out.bin"), mode],
                           check=True)
            got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).astype(np.float64)
            assert got.shape == ref.shape
            assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max(), (fmt, mode)


@pytest.mark.kernel_sources
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dequant_source_compiles_without_warnings(arch):
    assert [d for _, _, d in D.KERNELS] == [(), D.PDL_DEFINES]     # the op's build, pdl=True plans' (DQ_PDL)
    for src, names, defines in D.KERNELS:
        oc = _registry.compile_code(src, defines, target="cubin", arch=arch, cache=True)   # shared with test_kernels_build
        assert oc.log.strip() == ""
        assert len(names) == 15


# ------------------------------------------------------------------ CPU: checks on the double
@pytest.fixture
def fake(fake, monkeypatch):
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    return fake


def test_quantweight_checks(fake):
    buf = bc.empty((144 * 6,), "uint8")
    qw = D.QuantWeight(buf, "Q4_K", (3, 512))
    assert (qw.format, qw.ggml_type, qw.shape, qw.nbytes) == ("q4_k", 12, (3, 512), 864)
    assert D.QuantWeight(buf, gguf.GGMLQuantizationType.Q4_K, [3, 512]).format == "q4_k"
    with pytest.raises(ValueError, match="multiple of 256"):
        D.QuantWeight(buf, "q4_k", (6, 144))
    with pytest.raises(ValueError, match="864 bytes"):
        D.QuantWeight(buf, "q4_k", (2, 512))
    with pytest.raises(ValueError, match="16-byte aligned"):
        D.QuantWeight(bc.empty((144 * 6 + 2,), "uint8")[2:], "q4_k", (3, 512))
    with pytest.raises(ValueError, match="positive"):
        D.QuantWeight(buf, "q4_k", (0, 512))
    with pytest.raises(TypeError, match="address has"):
        D.QuantWeight(buf.ptr, "q4_k", (3, 512))
    with pytest.raises(ValueError, match="not supported"):
        D.QuantWeight(buf, "q2_k", (3, 512))


def test_dequantize_checks_raise_before_launch(fake):
    buf = bc.empty((34 * 10,), "uint8")
    n0 = fake.launch_count()
    with pytest.raises(TypeError, match="format= and shape="):
        D.dequantize(buf)
    with pytest.raises(ValueError, match="block format"):
        D.dequantize(bc.empty((40,), "uint8"), "f16", (20,))
    with pytest.raises(TypeError, match="dtype"):
        D.dequantize(buf, "q8_0", (10, 32), dtype="int32")
    with pytest.raises(ValueError, match="shape"):
        D.dequantize(buf, "q8_0", (10, 32), out=bc.empty((10, 31), "float16"))
    with pytest.raises(TypeError, match="dtype"):
        D.dequantize(buf, "q8_0", (10, 32), out=bc.empty((10, 32), "float32"))
    with pytest.raises(ValueError, match="aligned"):
        D.dequantize(buf, "q8_0", (10, 32), dtype="float32", out=bc.empty((10 * 32 + 1,), "float32")[1:].view(shape=(10, 32)))
    with pytest.raises(ValueError, match="out= is required"):
        D.plan_dequantize(buf, "q8_0", (10, 32), out=None)
    assert fake.launch_count() == n0


def test_dequantize_launch_on_the_double(fake):
    n_blocks = 8 * 33 + 3                       # q4_k: 33 full segments of 8 blocks and a partial one
    buf = bc.zeros((144 * n_blocks,), "uint8")
    out = D.dequantize(buf, "q4_k", (n_blocks, 256), dtype="bfloat16")
    assert out.shape == (n_blocks, 256) and out.dtype == "bfloat16"
    la = fake.last_launch()
    assert la.name == "dequant_q4_k_bf16"
    assert la.block == (128, 1, 1)
    assert la.grid[0] == (min(-(-34 // 4), A.sm_count(0) * D.GRID_PER_SM) if D.GRID_PER_SM else -(-34 // 4))
    assert struct.unpack_from("<QQq", la.params, 0) == (buf.ptr, out.ptr, n_blocks)
    qw = D.QuantWeight(buf, "q4_k", (n_blocks, 256))
    o2 = bc.empty((n_blocks, 256), "float32")
    plan = D.dequantize.plan(qw, dtype="float32", out=o2)
    n0 = fake.launch_count()
    plan()
    assert fake.launch_count() == n0 + 1
    assert fake.last_launch().name == "dequant_q4_k_f32"


def test_dequantize_pdl_plan_on_the_double(fake):
    """plan_dequantize(pdl=True): the DQ_PDL build launched once with programmatic stream
    serialization (cuLaunchKernelEx), the plain plan without it; graph.add_plan takes it."""
    n_blocks = 8 * 5 + 3
    buf = bc.zeros((34 * n_blocks * 8,), "uint8")
    out = bc.empty((n_blocks, 256), "float16")
    plan = D.plan_dequantize(buf, "q8_0", (n_blocks, 256), out=out, pdl=True)
    plain = D.plan_dequantize(buf, "q8_0", (n_blocks, 256), out=out)
    assert plan.kernel.name == plain.kernel.name == "dequant_q8_0_f16" and plan.grid == plain.grid
    plan()
    la = fake.last_launch()
    assert la.name == "dequant_q8_0_f16" and la.programmatic_serialization
    assert struct.unpack_from("<QQq", la.params, 0) == (buf.ptr, out.ptr, n_blocks * 8)
    plain()
    assert not fake.last_launch().programmatic_serialization
    g = bc.Graph()
    assert g.add_plan(plan, depends_on=g.add_plan(plain)).kind == "kernel"
    k4 = bc.zeros((144 * 100,), "uint8")                  # Q4_K pdl plans: a block a run of 24 GGUF blocks
    o4 = bc.empty((100, 256), "float16")
    assert D.plan_dequantize(k4, "q4_k", (100, 256), out=o4, pdl=True).grid[0] == -(-100 // D._PDL_CTA_BLOCKS["q4_k"])
    assert D.plan_dequantize(k4, "q4_k", (100, 256), out=o4).grid[0] == -(-100 // 32)


# ------------------------------------------------------------------ GPU
SHAPES = {  # (rows, cols) per block size: partial segments, odd block counts, 1 row
    32: [(1, 32), (3, 96), (7, 32 * 77), (129, 32 * 9), (64, 4096)],
    256: [(1, 256), (5, 768), (3, 256 * 17), (67, 256 * 3), (128, 4096)],
}


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("fmt", QFORMATS)
def test_dequantize_matches_gguf(fmt, dtype):
    rng = np.random.default_rng()
    qk = D.format_info(fmt)[2]
    for shape in SHAPES[qk]:
        raw = random_blocks(rng, fmt, shape[0] * shape[1])
        ref = reference(raw, fmt, shape)
        qb = bc.to_device(raw)
        got = from_dev(D.dequantize(qb, fmt, shape, dtype=dtype), dtype)
        err = np.abs(got - ref).max()
        tol = 1e-4 if dtype == "float32" else rounding(dtype) * np.abs(ref).max() * 1.01
        assert err <= tol, (fmt, dtype, shape, err)
        if dtype == "float32" and fmt == "q4_k":
            assert err < 1e-4


@gpu
@pytest.mark.parametrize("fmt", QFORMATS)
def test_dequantize_pdl_plans_in_a_chain(fmt):
    """plan_dequantize(pdl=True) plans chained in a graph (programmatic edges) and in a stream
    capture: each may start before the previous one ends, so two plans writing the same out
    must still leave the second's values (its stores wait for the first grid), and a plan whose
    input a plain kernel has just written must read the new bytes."""
    rng = np.random.default_rng()
    qk, nb = D.format_info(fmt)[2:]
    shape = (67, qk * 9)
    raws = [random_blocks(rng, fmt, shape[0] * shape[1]) for _ in range(3)]
    s = bc.Stream()
    qa, qb = bc.to_device(raws[0], stream=s), bc.to_device(raws[1], stream=s)
    qc = bc.zeros((raws[2].size,), "uint8", stream=s)
    src = bc.to_device(raws[2], stream=s)
    out, out2 = bc.empty(shape, "float32", stream=s), bc.empty(shape, "float32", stream=s)
    mod, _ = bc.compile_module('extern "C" __global__ void cp(const unsigned char* a, unsigned char* b, long long n) '
                               '{ long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = a[i]; }')
    cp = mod.get_kernel("cp").bind(-(-raws[2].size // 256), 256, src, qc, raws[2].size, stream=s)
    pa = D.plan_dequantize(qa, fmt, shape, dtype="float32", out=out, pdl=True, stream=s)
    pb = D.plan_dequantize(qb, fmt, shape, dtype="float32", out=out, pdl=True, stream=s)
    pc = D.plan_dequantize(qc, fmt, shape, dtype="float32", out=out2, pdl=True, stream=s)
    g = bc.Graph()
    g.add_plan(pc, depends_on=g.add_plan(cp, depends_on=g.add_plan(pb, depends_on=g.add_plan(pa))))
    s.synchronize()
    exe = g.instantiate()
    for _ in range(2):
        out.memset(0, stream=s)
        out2.memset(0, stream=s)
        exe.launch(s)
        s.synchronize()
        assert np.abs(from_dev(out, "float32") - reference(raws[1], fmt, shape)).max() < 1e-4
        assert np.abs(from_dev(out2, "float32") - reference(raws[2], fmt, shape)).max() < 1e-4
        qc.memset(0, stream=s)
    with s.capture() as g2:
        pb()
        pa()
    exe2 = g2.instantiate()
    exe2.launch(s)
    s.synchronize()
    assert np.abs(from_dev(out, "float32") - reference(raws[0], fmt, shape)).max() < 1e-4


@gpu
def test_dequantize_tail_chunk_and_offsets():
    """A Q8_0 tensor viewed at an odd 16-byte offset whose end is not 16-byte aligned: the
    last chunk is read 2 bytes at a time (memcheck-clean), the values still match."""
    rng = np.random.default_rng()
    fmt, shape = "q8_0", (5, 32 * 3)                    # 15 blocks = 510 bytes
    raw = random_blocks(rng, fmt, shape[0] * shape[1])
    big = bc.zeros((16 * 7 + raw.size,), "uint8")
    view = big[16 * 3: 16 * 3 + raw.size]
    view.copy_from(raw)
    got = from_dev(D.dequantize(D.QuantWeight(view, fmt, shape), dtype="float32"), "float32")
    assert np.abs(got - reference(raw, fmt, shape)).max() < 1e-5


@gpu
def test_dequantize_plan_in_a_captured_graph():
    rng = np.random.default_rng()
    fmt, shape = "q6_k", (33, 512)
    raw = random_blocks(rng, fmt, shape[0] * shape[1])
    s = bc.Stream()
    qb = bc.to_device(raw, stream=s)
    out = bc.empty(shape, "float16", stream=s)
    s.synchronize()
    with s.capture() as g:
        D.dequantize(qb, fmt, shape, out=out, stream=s)
    g.keep_alive(qb, out)
    exe = g.instantiate()
    for _ in range(2):
        out.memset(0, stream=s)
        exe.launch(s)
        s.synchronize()
        got = from_dev(out, "float16")
        ref = reference(raw, fmt, shape)
        assert np.abs(got - ref).max() <= 2 ** -11 * np.abs(ref).max() * 1.01
    raw2 = random_blocks(rng, fmt, shape[0] * shape[1])
    qb.copy_from(raw2, stream=s)
    out2 = bc.empty(shape, "float32", stream=s)
    plan = D.plan_dequantize(qb, fmt, shape, dtype="float32", out=out2, stream=s)
    plan()
    s.synchronize()
    assert np.abs(from_dev(out2, "float32") - reference(raw2, fmt, shape)).max() < 1e-5


@gpu
@pytest.mark.parametrize("grid,defs", [(1, ()), (3, ()), (2, (("DQ_K4U", 4),)), (3, (("DQ_K4U", 8), ("DQ_CS", 1))),
                                       (1, (("DQ_K4U", 12),))])
def test_dequantize_q4_k_direct_grid_stride(grid, defs):
    """Q4_K's direct kernel (the default, DQ_DIRECT=1; DQ_K4U parts a thread, DQ_CS streaming
    stores) on a grid smaller than the tensor's runs of 32 blocks: its grid-stride loop, a
    partial last run."""
    rng = np.random.default_rng()
    shape = (37, 256 * 9)                               # 333 blocks: 10 runs of 32 and 13
    raw = random_blocks(rng, "q4_k", shape[0] * shape[1])
    out = bc.empty(shape, "float32")
    _registry.get("dequant.cu", "dequant_q4_k_f32", defs).launch(grid, 128, bc.to_device(raw), out, raw.size // 144)
    assert np.abs(from_dev(out, "float32") - reference(raw, "q4_k", shape)).max() < 1e-4


@gpu
@pytest.mark.parametrize("grid,u,extra", [(1, 8, ()), (3, 8, (("DQ_RAW", 0),)), (2, 4, ()), (5, 16, ()),
                                          (2, 6, (("DQ_RAW", 1),)), (1, 12, (("DQ_RAW", 0), ("DQ_CS", 1))),
                                          (3, 8, (("DQ_CS", 1),))])
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1", "q6_k"])
def test_dequantize_direct_grid_stride(fmt, grid, u, extra):
    """The direct kernel of the other formats (DQ_DIRECT_ALL=1: every format; the default 2
    takes it for all but Q6_K; DQ_U parts a thread, DQ_RAW raw words first (the default),
    DQ_CS streaming stores) on grids smaller than the tensor (its grid-stride loop, a partial last run), the
    tensor a view at an odd 16-byte offset of a larger buffer ending 2 bytes past a word."""
    rng = np.random.default_rng()
    qk, nb = D.format_info(fmt)[2:]
    shape = (37, qk * 9)
    raw = random_blocks(rng, fmt, shape[0] * shape[1])
    big = bc.zeros((16 * 5 + raw.size,), "uint8")
    view = big[16 * 3: 16 * 3 + raw.size]
    view.copy_from(raw)
    out = bc.empty(shape, "float32")
    defs = (("DQ_DIRECT_ALL", 1), ("DQ_U", u)) + ((("DQ_RAW", 1),) if u == 4 else ()) + extra
    _registry.get("dequant.cu", f"dequant_{fmt}_f32", defs).launch(grid, 128, view, out, raw.size // nb)
    assert np.abs(from_dev(out, "float32") - reference(raw, fmt, shape)).max() < 1e-4


DIRECT_VARIANTS = [  # fmt, defines, warps a block, grid (0: the host's)
    ("q6_k", (("DQ6_Q", 1),), 4, 0), ("q6_k", (("DQ6_Q", 2),), 4, 3), ("q6_k", (("DQ6_Q", 3), ("DQ_CS", 1)), 4, 1),
    ("q6_k", (("DQ6_Q", 2), ("DQ_TMA", 1)), 4, 2), ("q6_k", (("DQ6_Q", 2), ("DQ_WARPS", 8)), 8, 1),
    ("q6_k", (("DQ6_Q", 1), ("DQ_TMA", 1)), 4, 0),
    ("q4_k", (("DQ_TMA", 1),), 4, 0), ("q4_k", (("DQ_TMA", 1),), 4, 2), ("q4_k", (("DQ_TMA", 1), ("DQ_WARPS", 8)), 8, 1),
    ("q4_k", (("DQ_WARPS", 8),), 8, 3),
    ("q8_0", (("DQ_TMA", 1),), 4, 0), ("q8_0", (("DQ_TMA", 1), ("DQ_WARPS", 8)), 8, 2), ("q8_0", (("DQ_WARPS", 8),), 8, 0),
    ("q4_1", (("DQ_TMA", 1),), 4, 3), ("q4_0", (("DQ_TMA", 1), ("DQ_DIRECT_ALL", 1), ("DQ_U", 6)), 4, 0),
    # the pipelined grid-stride loop (DQ_PIPE: the next run's loads before this run's stores), store
    # cache policies (DQ_ST 2/3), Q4_K's load hints (DQ_LDH 1/2)
    ("q4_k", (("DQ_PIPE", 1),), 4, 3), ("q4_k", (("DQ_PIPE", 1),), 4, 0),
    ("q4_k", (("DQ_PIPE", 1), ("DQ_K4U", 4), ("DQ_ST", 2)), 4, 2), ("q4_k", (("DQ_PIPE", 1), ("DQ_K4U", 4), ("DQ_LDH", 1)), 4, 1),
    ("q4_k", (("DQ_LDH", 2), ("DQ_ST", 3)), 4, 0), ("q4_k", (("DQ_PIPE", 1), ("DQ_TMA", 1)), 4, 2),
    ("q8_0", (("DQ_PIPE", 1),), 4, 1), ("q8_0", (("DQ_PIPE", 1), ("DQ_U", 4), ("DQ_ST", 2)), 4, 1), ("q8_0", (("DQ_ST", 3),), 4, 0),
    ("q6_k", (("DQ_PIPE", 1),), 4, 3), ("q6_k", (("DQ_PIPE", 1), ("DQ_ST", 2)), 4, 0),
    ("q4_1", (("DQ_PIPE", 1),), 4, 1), ("q4_1", (("DQ_PIPE", 1), ("DQ_U", 4), ("DQ_TMA", 0), ("DQ_ST", 2)), 4, 2),
    ("q4_0", (("DQ_DIRECT_ALL", 1), ("DQ_PIPE", 1), ("DQ_U", 4)), 4, 2),
    ("q4_0", (("DQ_DIRECT_ALL", 1), ("DQ_PIPE", 1), ("DQ_U", 4), ("DQ_ST", 2)), 4, 1),
    # bulk-copy reads into a ring of shared-memory stages (DQ_BULK, sm_90; the default kernels below),
    # full tiles and the blocks after them (tiles of 16 / 128 GGUF blocks: 333 blocks here)
    ("q4_k", (("DQ_BULK", 1),), 4, 3), ("q4_k", (("DQ_BULK", 1), ("DQ_BNS", 4), ("DQ_ST", 2)), 4, 0),
    ("q6_k", (("DQ_BULK", 1),), 4, 2), ("q6_k", (("DQ_BULK", 1), ("DQ_BNS", 4)), 4, 1),
    ("q8_0", (("DQ_BULK", 1),), 4, 1), ("q8_0", (("DQ_BULK", 1), ("DQ_BNS", 4), ("DQ_ST", 2)), 4, 2),
    ("q4_0", (("DQ_BULK", 1),), 4, 2), ("q4_1", (("DQ_BULK", 1),), 4, 3), ("q4_1", (("DQ_BULK", 1), ("DQ_BNS", 4)), 4, 0),
    # f32 outputs written in whole 32-byte sectors (DQ_F32P=1, the default: lane pairs swap halves; f16 unchanged)
    ("q4_k", (("DQ_F32P", 1),), 4, 0), ("q4_k", (("DQ_F32P", 1),), 4, 3), ("q6_k", (("DQ_F32P", 1),), 4, 0),
    ("q6_k", (("DQ_F32P", 1), ("DQ_DIRECT_ALL", 1), ("DQ_U", 3)), 4, 2), ("q8_0", (("DQ_F32P", 1),), 4, 1),
    ("q8_0", (("DQ_F32P", 1),), 4, 0), ("q4_1", (("DQ_F32P", 1),), 4, 0), ("q4_1", (("DQ_F32P", 1), ("DQ_TMA", 0)), 4, 2),
    ("q4_0", (("DQ_F32P", 1),), 4, 0), ("q4_0", (("DQ_F32P", 1), ("DQ_DIRECT_ALL", 1)), 4, 3),
    ("q4_k", (("DQ_F32P", 1), ("DQ_PDL", 1)), 4, 0), ("q8_0", (("DQ_F32P", 1), ("DQ_BULK", 1)), 4, 2),
    ("q8_0", (("DQ_F32P", 0),), 4, 0), ("q6_k", (("DQ_F32P", 0),), 4, 2),     # the plain form (the default before)
]


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("fmt,defs,warps,grid", DIRECT_VARIANTS,
                         ids=[f"{f}-{'-'.join(f'{k}{v}' for k, v in d)}-w{w}-g{g}" for f, d, w, g in DIRECT_VARIANTS])
def test_dequantize_direct_variants(fmt, defs, warps, grid, dtype):
    """The sweep's direct-kernel builds: Q6_K by quads (DQ6_Q: a thread the 4 parts of a
    half-block that share bytes), a block's run written by one bulk copy from shared memory
    (DQ_TMA, sm_90; f32 runs over 32 KB keep the plain stores), 8 warps a block (DQ_WARPS), on
    the host's grid and on smaller ones (the grid-stride loop, a partial last run), the tensor a
    view at an odd 16-byte offset ending 2 bytes past a word."""
    rng = np.random.default_rng()
    qk, nb = D.format_info(fmt)[2:]
    shape = (37, qk * 9)
    raw = random_blocks(rng, fmt, shape[0] * shape[1])
    big = bc.zeros((16 * 5 + raw.size,), "uint8")
    view = big[16 * 3: 16 * 3 + raw.size]
    view.copy_from(raw)
    out = bc.empty(shape, dtype)
    nblocks = raw.size // nb
    g = grid or -(-nblocks // (D._SEG[qk] * warps))
    code = {"float32": "f32", "float16": "f16"}[dtype]
    _registry.get("dequant.cu", f"dequant_{fmt}_{code}", defs).launch(g, 32 * warps, view, out, nblocks)
    ref = reference(raw, fmt, shape)
    tol = 1e-4 if dtype == "float32" else rounding(dtype) * np.abs(ref).max() * 1.01
    assert np.abs(from_dev(out, dtype) - ref).max() <= tol, (fmt, defs, grid)


@pytest.mark.kernel_sources
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dequant_sweep_builds_compile_without_warnings(arch):
    """The sweep's builds compile cleanly for both architectures (DQ_TMA is sm_90 code, the
    plain stores below it; DQ_FLOOR is the bench's no-math floor, not a dequantize; DQ_PIPE,
    DQ_ST and DQ_LDH the pipelined loop, store and load cache hints; DQ_BULK bulk-copy reads,
    sm_90, the default kernels below)."""
    for defs in ((("DQ_TMA", 1), ("DQ6_Q", 2)), (("DQ_FLOOR", 1), ("DQ_DIRECT_ALL", 1), ("DQ_TMA", 1)),
                 (("DQ_WARPS", 8), ("DQ_TMA", 1), ("DQ_DIRECT_ALL", 1)),
                 (("DQ_PIPE", 1), ("DQ_ST", 2), ("DQ_LDH", 2), ("DQ_DIRECT_ALL", 1)),
                 (("DQ_PIPE", 1), ("DQ_FLOOR", 1), ("DQ_TMA", 1), ("DQ_LDH", 1), ("DQ_ST", 3)),
                 (("DQ_BULK", 1), ("DQ_BNS", 4), ("DQ_ST", 2))):
        oc = _registry.compile_code("dequant.cu", defs, target="cubin", arch=arch)
        assert oc.log.strip() == "", defs


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("fmt,defines", [(f, (("DQ_P8", 0), ("DQ_DIRECT", 0), ("DQ_DIRECT_ALL", 0))) for f in QFORMATS]
                         + [(f, (("DQ_DIRECT", 0), ("DQ_DIRECT_ALL", 0))) for f in QFORMATS])
def test_dequantize_staged_layouts(fmt, defines, dtype):
    """dequant.cu's staged kernel (cp.async segments through shared memory; the default reads
    every format straight into registers: DQ_DIRECT, DQ_DIRECT_ALL) with 8 weights a lane and
    with DQ_P8=0 (a lane decodes 32-weight units): the bench's comparison rows."""
    rng = np.random.default_rng()
    qk = D.format_info(fmt)[2]
    code = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    kern = _registry.get("dequant.cu", f"dequant_{fmt}_{code}", defines)
    for shape in SHAPES[qk]:
        raw = random_blocks(rng, fmt, shape[0] * shape[1])
        ref = reference(raw, fmt, shape)
        qb = bc.to_device(raw)
        out = bc.empty(shape, dtype)
        nblocks = raw.size // D.format_info(fmt)[3]
        kern.launch(max(1, -(-nblocks // (D._SEG[qk] * 4))), 128, qb, out, nblocks)
        got = from_dev(out, dtype)
        tol = 1e-5 * np.abs(ref).max() if dtype == "float32" else rounding(dtype) * np.abs(ref).max() * 1.01
        assert np.abs(got - ref).max() <= tol, (fmt, dtype, shape)
