// elementwise.cu -- silu_mul (SwiGLU), gelu, add, mul over rows; embedding gather.
//
// Row kernels see (rows, d) arrays with a contiguous last axis and a row stride each,
// so a fused gate/up projection ([gate | up] in one row) is two views of one array.
// Entries: ew_{silu_mul,add,mul,gelu,gelu_tanh,silu}_{f32,f16,bf16}_{vec,scalar};
// unary ops ignore b. fp32 math.
//
// embedding_{i32,i64}_u{16,8,4,2,1}: out[t, :] = table[ids[t], :], copied in units of
// U bytes (the host picks the widest unit that divides the row and the alignments).
// An id outside [0, vocab) writes a zero row (a kernel cannot raise).
#include "rowwise.cuh"

enum { EW_SILU_MUL = 0, EW_ADD = 1, EW_MUL = 2, EW_GELU = 3, EW_GELU_TANH = 4, EW_SILU = 5 };

template <int OP> BC_DEV float ew_apply(float a, float b) {
    if (OP == EW_SILU_MUL) return a / (1.f + bc_exp(-a)) * b;
    if (OP == EW_ADD) return a + b;
    if (OP == EW_MUL) return a * b;
    if (OP == EW_GELU) return 0.5f * a * (1.f + erff(a * 0.7071067811865476f));
    if (OP == EW_GELU_TANH) return 0.5f * a * (1.f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a)));
    return a / (1.f + bc_exp(-a));   // EW_SILU
}

template <typename T, int VN, int OP>
__device__ void ew_rows(T* y, const T* a, const T* b, i64 rows, i32 d, i64 sy, i64 sa, i64 sb) {
    const int nch = d / VN;
    const i64 total = rows * nch;
    const bool small = total < 0x7fffffffLL;      // 32-bit index math (the common case) is cheaper
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total; g += (i64)gridDim.x * blockDim.x) {
        i64 r;
        int c;
        if (small) { const u32 r32 = (u32)g / (u32)nch; r = r32; c = (int)((u32)g - r32 * (u32)nch); }
        else { r = g / nch; c = (int)(g - r * nch); }
        float va[VN], vb[VN];
        BcChunk<T, VN>::load(a + r * sa, c, va);
        if (OP <= EW_MUL) BcChunk<T, VN>::load(b + r * sb, c, vb);
#pragma unroll
        for (int i = 0; i < VN; ++i) va[i] = ew_apply<OP>(va[i], OP <= EW_MUL ? vb[i] : 0.f);
        BcChunk<T, VN>::store(y + r * sy, c, va);
    }
}

#define EW_ENTRY(code, T, name, OP)                                                                    \
    extern "C" __global__ void ew_##name##_##code##_vec(T* y, const T* a, const T* b, i64 rows, i32 d, \
                                                        i64 sy, i64 sa, i64 sb) {                      \
        ew_rows<T, 16 / sizeof(T), OP>(y, a, b, rows, d, sy, sa, sb); }                                \
    extern "C" __global__ void ew_##name##_##code##_scalar(T* y, const T* a, const T* b, i64 rows,    \
                                                           i32 d, i64 sy, i64 sa, i64 sb) {            \
        ew_rows<T, 1, OP>(y, a, b, rows, d, sy, sa, sb); }
#define EW_ENTRIES(code, T) EW_ENTRY(code, T, silu_mul, EW_SILU_MUL) EW_ENTRY(code, T, add, EW_ADD)   \
    EW_ENTRY(code, T, mul, EW_MUL) EW_ENTRY(code, T, gelu, EW_GELU)                                    \
    EW_ENTRY(code, T, gelu_tanh, EW_GELU_TANH) EW_ENTRY(code, T, silu, EW_SILU)

BC_FOR_FLOATS(EW_ENTRIES)

// ------------------------------------------------------------------ embedding
template <int U> struct EmbUnit;
template <> struct EmbUnit<16> { typedef uint4 t; };
template <> struct EmbUnit<8> { typedef uint2 t; };
template <> struct EmbUnit<4> { typedef u32 t; };
template <> struct EmbUnit<2> { typedef u16 t; };
template <> struct EmbUnit<1> { typedef u8 t; };

// one block per token (grid.x = tokens, grid-stride over tokens beyond 2^31-1 not needed)
template <typename I, int U>
__device__ void embedding_impl(u8* out, const u8* table, const I* ids, i64 ntok, i64 vocab,
                               i64 row_units, i64 out_stride, i64 table_stride) {
    typedef typename EmbUnit<U>::t V;
    for (i64 t = blockIdx.x; t < ntok; t += gridDim.x) {
        const i64 id = (i64)ids[t];
        V* o = reinterpret_cast<V*>(out + t * out_stride);
        if (id < 0 || id >= vocab) {
            V z;
            memset(&z, 0, sizeof(z));
            for (i64 u = threadIdx.x; u < row_units; u += blockDim.x) o[u] = z;
            continue;
        }
        const V* s = reinterpret_cast<const V*>(table + id * table_stride);
        for (i64 u = threadIdx.x; u < row_units; u += blockDim.x) o[u] = s[u];
    }
}

#define EMB_ENTRY(icode, I, U)                                                                        \
    extern "C" __global__ void embedding_##icode##_u##U(u8* out, const u8* table, const I* ids,      \
            i64 ntok, i64 vocab, i64 row_units, i64 out_stride, i64 table_stride) {                    \
        embedding_impl<I, U>(out, table, ids, ntok, vocab, row_units, out_stride, table_stride); }
#define EMB_ENTRIES(icode, I) EMB_ENTRY(icode, I, 16) EMB_ENTRY(icode, I, 8) EMB_ENTRY(icode, I, 4) \
    EMB_ENTRY(icode, I, 2) EMB_ENTRY(icode, I, 1)
EMB_ENTRIES(i32, i32)
EMB_ENTRIES(i64, i64)
