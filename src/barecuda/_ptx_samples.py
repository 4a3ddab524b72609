"""PTX texts the package itself loads: the doctor's check kernel, the benchmark's kernels
and the decode-loop example's kernel. One place for the package's PTX: the tests' own
texts (tests/ptx/) take ``header`` and ``vadd`` from here.

Hand-written for ``sm_52`` so that every GPU the driver supports JIT-compiles them.
"""

__all__ = ["header", "vadd", "DOCTOR_VADD", "BENCH_KERNELS", "GRAPH_VADD", "AXPB"]


# %r1 = the thread's global index (ctaid.x * ntid.x + tid.x); threads at or past %r2 (n)
# branch to $L__done. The elementwise kernels below share it.
_INDEX_OR_DONE = """    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra $L__done;
"""


def header(target="sm_52", version="8.0"):
    """The directives a module starts with: PTX ISA `version`, `target`, 64-bit addresses."""
    return f".version {version}\n.target {target}\n.address_size 64\n"


def vadd(head, pointer="", name="vadd"):
    """A module `head` (``header()``) + the kernel ``name(out, a, b, n)``: out[i] = a[i] + b[i]
    for i < n (float32). `pointer` qualifies the three pointer parameters (".ptr .global
    .align 4 " in tests/ptx/gpu.py); the parameter layout is the same either way."""
    return head + f"""
.visible .entry {name}(
    .param .u64 {pointer}out,
    .param .u64 {pointer}a,
    .param .u64 {pointer}b,
    .param .u32 n
)
""" + """{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [a];
    ld.param.u64 %rd3, [b];
    ld.param.u32 %r2, [n];
""" + _INDEX_OR_DONE + r"""    cvta.to.global.u64 %rd4, %rd2;
    cvta.to.global.u64 %rd5, %rd3;
    cvta.to.global.u64 %rd6, %rd1;
    mul.wide.u32 %rd7, %r1, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
$L__done:
    ret;
}
"""


# bc_doctor_vadd(out, a, b, n): out[i] = a[i] + b[i], float32 (python -m barecuda's self-check).
DOCTOR_VADD = vadd(header(), name="bc_doctor_vadd")


def _first_thread_only(done):
    """PTX: thread 0 of block 0 goes on; every other thread branches to `done`."""
    return ("    mov.u32 %r1, %tid.x;\n"
            "    mov.u32 %r2, %ctaid.x;\n"
            "    or.b32 %r3, %r1, %r2;\n"
            "    setp.ne.u32 %p1, %r3, 0;\n"
            f"    @%p1 bra {done};\n")


# The launch benchmark's kernels (barecuda.bench.context): each does almost nothing (one
# thread writes one value) so that the CPU cost of issuing the launch dominates.
BENCH_KERNELS = r"""
.version 8.0
.target sm_52
.address_size 64

.visible .entry bc_k0()
{
    ret;
}

.visible .entry bc_k4(
    .param .u64 bc_k4_out,
    .param .u64 bc_k4_in,
    .param .u32 bc_k4_n,
    .param .f32 bc_k4_x
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;
""" + _first_thread_only("$L_k4_done") + r"""    ld.param.u64 %rd1, [bc_k4_out];
    ld.param.u64 %rd2, [bc_k4_in];
    ld.param.u32 %r1, [bc_k4_n];
    ld.param.f32 %f1, [bc_k4_x];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    ld.global.f32 %f2, [%rd4];
    cvt.rn.f32.u32 %f3, %r1;
    fma.rn.f32 %f2, %f2, %f1, %f3;
    st.global.f32 [%rd3], %f2;
$L_k4_done:
    ret;
}

.visible .entry bc_k4p(
    .param .u64 bc_k4p_out,
    .param .u64 bc_k4p_a,
    .param .u64 bc_k4p_b,
    .param .u64 bc_k4p_c
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<9>;
""" + _first_thread_only("$L_k4p_done") + r"""    ld.param.u64 %rd1, [bc_k4p_out];
    ld.param.u64 %rd2, [bc_k4p_a];
    ld.param.u64 %rd3, [bc_k4p_b];
    ld.param.u64 %rd4, [bc_k4p_c];
    cvta.to.global.u64 %rd5, %rd1;
    cvta.to.global.u64 %rd6, %rd2;
    cvta.to.global.u64 %rd7, %rd3;
    cvta.to.global.u64 %rd8, %rd4;
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd8];
    fma.rn.f32 %f1, %f1, %f2, %f3;
    st.global.f32 [%rd5], %f1;
$L_k4p_done:
    ret;
}

.visible .entry bc_k16(
    .param .u64 bc_k16_p0,
    .param .u32 bc_k16_a1,
    .param .f32 bc_k16_a2,
    .param .u64 bc_k16_p3,
    .param .s32 bc_k16_a4,
    .param .f64 bc_k16_a5,
    .param .u64 bc_k16_p6,
    .param .u64 bc_k16_a7,
    .param .u32 bc_k16_a8,
    .param .f32 bc_k16_a9,
    .param .u64 bc_k16_p10,
    .param .s64 bc_k16_a11,
    .param .f32 bc_k16_a12,
    .param .u32 bc_k16_a13,
    .param .u64 bc_k16_p14,
    .param .f64 bc_k16_a15
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
""" + _first_thread_only("$L_k16_done") + r"""    ld.param.u64 %rd1, [bc_k16_p0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.u32 %r1, [bc_k16_a1];
    ld.param.u32 %r2, [bc_k16_a8];
    ld.param.u32 %r4, [bc_k16_a13];
    add.u32 %r5, %r1, %r2;
    add.u32 %r5, %r5, %r4;
    st.global.u32 [%rd2], %r5;
$L_k16_done:
    ret;
}
"""


# gvadd(o, a, b, n): o[i] = a[i] + b[i] for the first block (the graph benchmark rows).
GRAPH_VADD = r"""
.version 8.0
.target sm_52
.address_size 64
.visible .entry gvadd(.param .u64 o, .param .u64 a, .param .u64 b, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [o];
    ld.param.u64 %rd2, [a];
    ld.param.u64 %rd3, [b];
    ld.param.u32 %r2, [n];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra $L__done;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd7];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd5], %f3;
$L__done:
    ret;
}
"""


# axpb(x, src, alpha, n): x[i] = alpha * x[i] + src[i] for i < n, float32 (examples/decode_loop.py).
AXPB = r"""
.version 8.0
.target sm_52
.address_size 64

// x[i] = alpha * x[i] + src[i] for i < n
.visible .entry axpb(
    .param .u64 x,
    .param .u64 src,
    .param .f32 alpha,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [src];
    ld.param.f32 %f1, [alpha];
    ld.param.u32 %r2, [n];
""" + _INDEX_OR_DONE + r"""    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd6], %f4;
$L__done:
    ret;
}
"""
