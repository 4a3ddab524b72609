"""Hand-written PTX for the GPU tests (tests/launch/test_launch_gpu.py). No nvcc needed: the
driver JIT-compiles these. Every text here is checked with ``ptxas`` in
test_launch_gpu.py when ptxas is installed (that check runs without a GPU too).
The module header and ``vadd`` come from the package (barecuda/_ptx_samples.py) through
tests/ptx/__init__.py, which the CPU tests use.
"""

from ptx import header as _header, vadd


def header(target="sm_52"):
    """``.version 8.0``, ``.target <target>``, ``.address_size 64``."""
    return _header(target)


# out[i] = a[i] + b[i], float32, i < n (the kernel text is the package's: barecuda/_ptx_samples.py)
VADD = vadd(header(), pointer=".ptr .global .align 4 ")

# width in bytes of each PTX scalar type
SIZES = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2, "u32": 4, "s32": 4, "b32": 4,
         "f32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8}


def echo(t, name=None):
    """PTX of ``echo_<t>(out, v)``: stores parameter v, bit for bit, at out[0]."""
    name = name or f"echo_{t}"
    size = SIZES[t]
    reg = {1: ".b16", 2: ".b16", 4: ".b32", 8: ".b64"}[size]
    op = {1: "u8", 2: "b16", 4: "b32", 8: "b64"}[size]
    return header() + f"""
.visible .entry {name}(
    .param .u64 out,
    .param .{t} v
)
{{
    .reg {reg} %x;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.{op} %x, [v];
    st.global.{op} [%rd2], %x;
    ret;
}}
"""


# struct {double x; int y; float z[3];} (24 bytes, align 8) copied to out[0:24]
STRUCT_ECHO = header() + """
.visible .entry struct_echo(
    .param .u64 out,
    .param .align 8 .b8 s[24]
)
{
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.b64 %rd3, [s];
    ld.param.b64 %rd4, [s+8];
    ld.param.b64 %rd5, [s+16];
    st.global.b64 [%rd2], %rd3;
    st.global.b64 [%rd2+8], %rd4;
    st.global.b64 [%rd2+16], %rd5;
    ret;
}
"""


def sixteen():
    """``sixteen(out, a1..a7 (f32), b1..b8 (u32))``: writes the 15 scalars as 32-bit words."""
    params = ["    .param .u64 out"]
    params += [f"    .param .f32 a{i}" for i in range(1, 8)]
    params += [f"    .param .u32 b{i}" for i in range(1, 9)]
    body = []
    for j, p in enumerate([f"a{i}" for i in range(1, 8)] + [f"b{i}" for i in range(1, 9)]):
        body.append(f"    ld.param.b32 %r1, [{p}];\n    st.global.b32 [%rd2+{4 * j}], %r1;")
    return header() + ".visible .entry sixteen(\n" + ",\n".join(params) + "\n)\n{\n" + \
        "    .reg .b32 %r<2>;\n    .reg .b64 %rd<3>;\n    ld.param.u64 %rd1, [out];\n" + \
        "    cvta.to.global.u64 %rd2, %rd1;\n" + "\n".join(body) + "\n    ret;\n}\n"


SIXTEEN = sixteen()

# A module-scope variable and a kernel that adds `by` to it.
GLOBAL_BUMP = header() + """
.visible .global .align 4 .u32 gcounter;

.visible .entry bump(.param .u32 by)
{
    .reg .b32 %r<4>;
    ld.param.u32 %r1, [by];
    ld.global.u32 %r2, [gcounter];
    add.u32 %r3, %r2, %r1;
    st.global.u32 [gcounter], %r3;
    ret;
}
"""

# out[blockIdx.x] = %cluster_ctarank (sm_90: thread block clusters)
CLUSTER_RANK = header("sm_90") + """
.visible .entry cluster_rank(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<5>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $L__done;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %cluster_ctarank;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r3;
$L__done:
    ret;
}
"""

# Grid-wide barrier through an atomic counter (needs a cooperative launch: all blocks
# co-resident). Phase 1: first[b] = b + 1. Barrier. Phase 2: second[b] = first[(b + 1) % n].
# Thread 0 of each block arrives and spins; bar.sync holds the rest of the block.
GRID_SYNC = header() + """
.visible .entry grid_sync(
    .param .u64 first,
    .param .u64 second,
    .param .u64 counter
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [first];
    ld.param.u64 %rd2, [second];
    ld.param.u64 %rd3, [counter];
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %nctaid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra $L__wait;
    add.u32 %r4, %r2, 1;
    mul.wide.u32 %rd7, %r2, 4;
    add.s64 %rd8, %rd4, %rd7;
    st.global.u32 [%rd8], %r4;
    membar.gl;
    atom.global.add.u32 %r5, [%rd6], 1;
$L__spin:
    ld.volatile.global.u32 %r6, [%rd6];
    setp.lt.u32 %p2, %r6, %r3;
    @%p2 bra $L__spin;
    membar.gl;
$L__wait:
    bar.sync 0;
    @%p1 bra $L__done;
    add.u32 %r7, %r2, 1;
    rem.u32 %r8, %r7, %r3;
    mul.wide.u32 %rd9, %r8, 4;
    add.s64 %rd10, %rd4, %rd9;
    ld.volatile.global.u32 %r9, [%rd10];
    mul.wide.u32 %rd11, %r2, 4;
    add.s64 %rd11, %rd5, %rd11;
    st.global.u32 [%rd11], %r9;
$L__done:
    ret;
}
"""

# out[i] = x * a[i] + y[i] (float32) with dynamic shared memory staging: exercises shared_mem.
SAXPY_SHARED = header() + """
.extern .shared .align 4 .b8 smem[];

.visible .entry saxpy_shared(
    .param .u64 out,
    .param .u64 a,
    .param .u64 y,
    .param .f32 x,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<6>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [a];
    ld.param.u64 %rd3, [y];
    ld.param.f32 %f1, [x];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra $L__done;
    cvta.to.global.u64 %rd4, %rd2;
    cvta.to.global.u64 %rd5, %rd3;
    cvta.to.global.u64 %rd6, %rd1;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.f32 %f2, [%rd8];
    mov.u64 %rd9, smem;
    mul.wide.u32 %rd10, %r4, 4;
    add.s64 %rd9, %rd9, %rd10;
    st.shared.f32 [%rd9], %f2;
    ld.shared.f32 %f3, [%rd9];
    add.s64 %rd11, %rd5, %rd7;
    ld.global.f32 %f4, [%rd11];
    fma.rn.f32 %f5, %f1, %f3, %f4;
    add.s64 %rd11, %rd6, %rd7;
    st.global.f32 [%rd11], %f5;
$L__done:
    ret;
}
"""

INVALID = header() + """
.visible .entry broken(.param .u32 x)
{
    this is not an instruction;
    ret;
}
"""

ALL = {"VADD": VADD, "STRUCT_ECHO": STRUCT_ECHO, "SIXTEEN": SIXTEEN, "GLOBAL_BUMP": GLOBAL_BUMP,
       "CLUSTER_RANK": CLUSTER_RANK, "GRID_SYNC": GRID_SYNC, "SAXPY_SHARED": SAXPY_SHARED,
       **{f"ECHO_{t.upper()}": echo(t) for t in SIZES}}

# CUDA C for the nvcc-compiled module tests (cubin / fatbin).
CUDA_C = r"""
extern "C" __global__ void scale(float *out, const float *a, float s, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * s;
}
__device__ int dev_value = 5;
"""


# ------------------------------------------------- kernels of the concurrency and memory GPU tests

# Every thread of one block waits until the host writes a non-zero flag into mapped
# pinned memory, then fills buf[0..n) with `value`.
SPIN = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry spin_then_fill(
    .param .u64 p_flag,
    .param .u64 p_buf,
    .param .u32 p_n,
    .param .u32 p_value
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [p_flag];
    ld.param.u64 %rd2, [p_buf];
    ld.param.u32 %r1, [p_n];
    ld.param.u32 %r2, [p_value];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
$WAIT:
    ld.volatile.global.u32 %r3, [%rd1];
    setp.eq.u32 %p1, %r3, 0;
    @%p1 bra $WAIT;
    mov.u32 %r4, %tid.x;
$LOOP:
    setp.ge.u32 %p2, %r4, %r1;
    @%p2 bra $DONE;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    add.u32 %r4, %r4, 256;
    bra $LOOP;
$DONE:
    ret;
}
"""

# Every thread of one block spins for `cycles` SM clock cycles, then writes its index
# to out[tid]: queued work that keeps a stream busy for a known time, then writes.
DELAY = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry delay_then_mark(
    .param .u64 p_out,
    .param .u64 p_cycles
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [p_out];
    ld.param.u64 %rd2, [p_cycles];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd3, %clock64;
$SPIN:
    mov.u64 %rd4, %clock64;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.u64 %p1, %rd5, %rd2;
    @%p1 bra $SPIN;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd1, %rd6;
    st.global.u32 [%rd7], %r1;
    ret;
}
"""

# Stores 42 at the address it is given: with an unmapped address, an illegal-address
# fault (CUDA_ERROR_ILLEGAL_ADDRESS, sticky: the context is lost for the process).
POKE = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry poke(
    .param .u64 p_addr
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [p_addr];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 42;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""

# bc_seed_count(ctr, idx): ctr[idx] += 1 (one thread).
# bc_seed_spin(out, idx, ns): spin on %globaltimer for `ns` nanoseconds, then write
# the elapsed ns to out[idx] (one thread).
SEED = r"""
.version 8.0
.target sm_52
.address_size 64

.visible .entry bc_seed_count(
    .param .u64 ctr,
    .param .u32 idx
)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [ctr];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u32 %r1, [idx];
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    atom.global.add.u32 %r2, [%rd3], 1;
    ret;
}

.visible .entry bc_seed_spin(
    .param .u64 out,
    .param .u32 idx,
    .param .u64 ns
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<9>;
    mov.u64 %rd1, %globaltimer;
    ld.param.u64 %rd2, [ns];
$L_spin:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd1;
    setp.lt.u64 %p1, %rd4, %rd2;
    @%p1 bra $L_spin;
    ld.param.u64 %rd5, [out];
    cvta.to.global.u64 %rd5, %rd5;
    ld.param.u32 %r1, [idx];
    mul.wide.u32 %rd6, %r1, 8;
    add.u64 %rd7, %rd5, %rd6;
    st.global.u64 [%rd7], %rd4;
    ret;
}
"""

