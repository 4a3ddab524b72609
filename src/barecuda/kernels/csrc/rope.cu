// rope.cu -- rotary position embedding on q (and k) in one launch.
//
// Tensors are (N, H, D) with a contiguous last axis; token n has position
//   positions ? positions[n % seqlen] : (pos_ptr ? *pos_ptr : pos0) + n % seqlen
// so a captured graph can read the position from device memory. The first `rot`
// dimensions of a head rotate (partial rotary), the rest are copied (when y != x).
//   layout llama (interleaved): pairs (2i, 2i+1)       -- Meta's llama, GGUF "norm" rope
//   layout neox  (half split):  pairs (i, i + rot/2)   -- GPT-NeoX, HF transformers
// inv_freq_i = theta^(-2i/rot), with llama3 scaling when l3_factor > 0 (HF's
// _compute_llama3_parameters), computed in double and rounded to fp32 once; the angle
// is pos * inv_freq in fp32, as HF computes it.
// Entries: rope_{f32,f16,bf16}_{llama,neox}.
#include "common.cuh"

#define ROPE_MAX_HALF 512          // rot <= 1024 (the host checks)

struct RopeT {            // one tensor's geometry
    void* y; const void* x;
    i64 syn, syh, sxn, sxh;  // strides in elements: token, head
    i32 heads;
};

// computed in double and rounded once to float: the same float on every GPU and in the
// float64 test reference (a float powf would differ by a few ulps, which pos * inv_freq
// multiplies into visible angle errors at long positions)
BC_DEV float rope_inv_freq(int i, int rot, float theta, float l3_factor, float l3_low, float l3_high, float l3_orig) {
    double inv = 1.0 / pow((double)theta, (double)(2 * i) / (double)rot);
    if (l3_factor > 0.f) {
        const double wavelen = 6.283185307179586 / inv;
        const double low_wl = (double)l3_orig / l3_low, high_wl = (double)l3_orig / l3_high;
        if (wavelen > low_wl) {
            inv = inv / l3_factor;
        } else if (!(wavelen < high_wl)) {        // medium frequencies: smooth between the two
            const double s = ((double)l3_orig / wavelen - l3_low) / ((double)l3_high - l3_low);
            inv = (1.0 - s) * inv / l3_factor + s * inv;
        }
    }
    return (float)inv;
}

// One thread a (token, pair j < rot/2) and head group: cos/sin once, then the heads
// blockIdx.y, blockIdx.y + gridDim.y, ... of q then k (grid.y splits the heads when there
// are few tokens: decode); the same thread copies the unrotated tail (dims rot + j,
// rot + j + rot/2, ...) when y != x.
template <typename T, bool NEOX>
__device__ void rope_impl(RopeT q, RopeT k, i64 ntok, i32 seqlen, i32 D, i32 rot, const i32* positions,
                          const i32* pos_ptr, i32 pos0, float theta,
                          float l3_factor, float l3_low, float l3_high, float l3_orig) {
    const int half = rot >> 1;
    const i64 total = ntok * half;
    const int base = positions ? 0 : (pos_ptr ? *pos_ptr : pos0);
    __shared__ float inv_tab[ROPE_MAX_HALF];
    for (int i = threadIdx.x; i < half; i += blockDim.x)
        inv_tab[i] = rope_inv_freq(i, rot, theta, l3_factor, l3_low, l3_high, l3_orig);
    __syncthreads();
    const bool small = total < 0x7fffffffLL;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total; g += (i64)gridDim.x * blockDim.x) {
        i64 n;
        int j;
        if (small) { const u32 n32 = (u32)g / (u32)half; n = n32; j = (int)((u32)g - n32 * (u32)half); }
        else { n = g / half; j = (int)(g - n * half); }
        const int tpos = (int)(n % seqlen);
        const int pos = positions ? positions[tpos] : base + tpos;
        float s, c;
        sincosf(__fmul_rn((float)pos, inv_tab[j]), &s, &c);
        const int i0 = NEOX ? j : 2 * j, i1 = NEOX ? j + half : 2 * j + 1;
        const int HT = q.heads + k.heads;
#pragma unroll 4
        for (int hh = blockIdx.y; hh < HT; hh += gridDim.y) {
            const bool isq = hh < q.heads;
            const RopeT& R = isq ? q : k;
            const int h = isq ? hh : hh - q.heads;
            const T* x = (const T*)R.x + n * R.sxn + (i64)h * R.sxh;
            T* y = (T*)R.y + n * R.syn + (i64)h * R.syh;
            const float a = bc_load(x + i0), b = bc_load(x + i1);
            bc_store(y + i0, a * c - b * s);
            bc_store(y + i1, b * c + a * s);
            if (y != x && rot < D)
                for (int i = rot + j; i < D; i += half) y[i] = x[i];
        }
    }
}

#define ROPE_ENTRY(code, T, lay, NEOX)                                                              \
    extern "C" __global__ void rope_##code##_##lay(                                                 \
            T* qy, const T* qx, i64 qsyn, i64 qsyh, i64 qsxn, i64 qsxh, i32 qheads,                  \
            T* ky, const T* kx, i64 ksyn, i64 ksyh, i64 ksxn, i64 ksxh, i32 kheads,                  \
            i64 ntok, i32 seqlen, i32 D, i32 rot, const i32* positions, const i32* pos_ptr, i32 pos0,\
            float theta, float l3_factor, float l3_low, float l3_high, float l3_orig) {             \
        RopeT q = {qy, qx, qsyn, qsyh, qsxn, qsxh, qheads};                                          \
        RopeT k = {ky, kx, ksyn, ksyh, ksxn, ksxh, kheads};                                          \
        rope_impl<T, NEOX>(q, k, ntok, seqlen, D, rot, positions, pos_ptr, pos0, theta,             \
                           l3_factor, l3_low, l3_high, l3_orig); }
#define ROPE_ENTRIES(code, T) ROPE_ENTRY(code, T, llama, false) ROPE_ENTRY(code, T, neox, true)

BC_FOR_FLOATS(ROPE_ENTRIES)
