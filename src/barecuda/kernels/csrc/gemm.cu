// gemm.cu -- C = alpha * op(A) op(B) + beta * C, strided batches, fp32 accumulation (owner: K3).
//
// Entry points:
//   gemm_tc_f16 / gemm_tc_bf16   tensor cores (mma.sync m16n8k16 through ldmatrix), a GEMM_BM x GEMM_BN x
//                                GEMM_BK block tile over GEMM_WARPS_M x GEMM_WARPS_N warps, a
//                                GEMM_STAGES-deep cp.async pipeline.
//                                Needs 16-byte aligned bases, leading dims and batch strides that are
//                                multiples of 8 elements, and the contiguous extent of each operand
//                                (K, or M / N for a transposed operand) a multiple of 8.
//   gemm_simt_f32 / _f16 / _bf16  any strides and shapes (fp32 FFMA; the fp32 path and the fallback).
//
// Layout: row-major. op(A) is M x K: A is M x K (lda >= K) or, with TRANS_A, K x M (lda >= M);
// op(B) is K x N: B is K x N (ldb >= N) or, with TRANS_B, N x K (ldb >= K). C is M x N (ldc).
// Defines: TRANS_A, TRANS_B (0/1, the tensor-core build); GEMM_STAGES; GEMM_BK (32 or 64); GEMM_BM,
// GEMM_BN, GEMM_WARPS_M, GEMM_WARPS_N (the block and warp tiles); GEMM_DB (fragment double buffering);
// GEMM_PF (L2 prefetch hint on the tile copies); GEMM_GM (the grouped raster's height).
#include "gemm_store.cuh"

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef GEMM_STAGES
#define GEMM_STAGES 3
#endif
#ifndef GEMM_BK
#define GEMM_BK 64
#endif
#ifndef GEMM_BM
#define GEMM_BM 128
#endif
#ifndef GEMM_BN
#define GEMM_BN 128
#endif
#ifndef GEMM_WARPS_M
#define GEMM_WARPS_M 2
#endif
#ifndef GEMM_WARPS_N
#define GEMM_WARPS_N 2
#endif
#ifndef GEMM_SIMT
#define GEMM_SIMT 0
#endif
#ifndef GEMM_DB
#define GEMM_DB 0   // 1: register double-buffered fragments (see gemm_tc_impl)
#endif
#ifndef GEMM_PF
#define GEMM_PF 0   // 1: tile copies carry the L2 256-byte prefetch hint
#endif
#ifndef GEMM_GM
#define GEMM_GM 8   // grouped raster: this many row tiles share their column tiles in L2
#endif

namespace {

#if !GEMM_SIMT
constexpr int BM = GEMM_BM, BN = GEMM_BN, BK = GEMM_BK, GROUP_M = GEMM_GM;
constexpr int NTH = GEMM_WARPS_M * GEMM_WARPS_N * 32;
constexpr int WTM = BM / GEMM_WARPS_M, WTN = BN / GEMM_WARPS_N;   // warp tile
constexpr int MI = WTM / 16, NJ = WTN / 8;                         // mma tiles per warp
static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile: multiples of 16");
static_assert(BK == 32 || BK == 64, "GEMM_BK: 32 or 64");
// shared rows padded by 16 bytes: every ldmatrix phase hits 8 distinct bank groups
constexpr int A_ROWS = TRANS_A ? BK : BM, A_COLS = TRANS_A ? BM : BK;
constexpr int B_ROWS = TRANS_B ? BN : BK, B_COLS = TRANS_B ? BK : BN;
constexpr int A_RS = A_COLS * 2 + 16, B_RS = B_COLS * 2 + 16;
constexpr int A_BYTES = A_ROWS * A_RS, B_BYTES = B_ROWS * B_RS;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
static_assert((A_ROWS * A_COLS / 8) % NTH == 0 && (B_ROWS * B_COLS / 8) % NTH == 0, "tile copies: whole rounds");

// One operand tile into shared memory (16-byte cp.async, zero-filled outside the matrix):
// ROWS x COLS elements at a row pitch of RS bytes. K_ROWS: the tile's rows run along k and its
// columns along the outer dimension (m or n, from o0, O elements); else the other way round.
template <int ROWS, int COLS, int RS, int K_ROWS>
BC_DEV void gemm_load_tile(bc_u32 dst, const bc_u16* P, long long ld, int tid, int o0, int O, int k0, int K) {
#pragma unroll
    for (int i = 0; i < (ROWS * COLS / 8) / NTH; ++i) {
        const int c = tid + i * NTH;
        const int row = c / (COLS / 8), cc = c % (COLS / 8);
        const int r = (K_ROWS ? k0 : o0) + row, col = (K_ROWS ? o0 : k0) + cc * 8;
        const bool ok = r < (K_ROWS ? K : O) && col < (K_ROWS ? O : K);
        const bc_u16* src = ok ? P + (long long)r * ld + col : P;
        if (GEMM_PF)
            bc_cp_async16_pf(dst + (bc_u32)(row * RS + cc * 16), src, ok);
        else
            bc_cp_async16(dst + (bc_u32)(row * RS + cc * 16), src, ok);
    }
}

template <int IS_BF16>
BC_DEV void gemm_tc_impl(const bc_u16* __restrict__ A, const bc_u16* __restrict__ B, bc_u16* __restrict__ C, int M,
                         int N, int K, long long lda, long long ldb, long long ldc, long long sa, long long sb,
                         long long sc, float alpha, float beta) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / GEMM_WARPS_N, wn = warp % GEMM_WARPS_N;
    // grouped raster over the tiles (GROUP_M row tiles share their B tiles in L2)
    const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int width = GROUP_M * num_n;
    const int first_m = (pid / width) * GROUP_M;
    const int gsz = min(num_m - first_m, GROUP_M);
    const int tm = first_m + (pid % width) % gsz;
    const int tn = (pid % width) / gsz;
    const int m0 = tm * BM, n0 = tn * BN;
    A += blockIdx.z * sa;
    B += blockIdx.z * sb;
    C += blockIdx.z * sc;
    const bc_u32 sbase = bc_smem_addr(smem);
    const int KT = (K + BK - 1) / BK;

    auto load = [&](int kt) {
        const bc_u32 as = sbase + (bc_u32)((kt % GEMM_STAGES) * STAGE_BYTES);
        const int k0 = kt * BK;
        // A: rows are k (columns m) when transposed; B: rows are k (columns n) unless transposed
        gemm_load_tile<A_ROWS, A_COLS, A_RS, TRANS_A>(as, A, lda, tid, m0, M, k0, K);
        gemm_load_tile<B_ROWS, B_COLS, B_RS, !TRANS_B>(as + A_BYTES, B, ldb, tid, n0, N, k0, K);
    };

    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

#pragma unroll
    for (int s = 0; s < GEMM_STAGES - 1; ++s) {
        if (s < KT) load(s);
        bc_cp_async_commit();
    }
    const int r8 = lane & 7, i8 = lane >> 3;
    // the fragments of k-step kk (16 deep) of a pipeline stage
    auto frag = [&](int stage, int kk, bc_u32 (&a)[MI][4], bc_u32 (&b)[NJ][2]) {
        const bc_u32 as = sbase + (bc_u32)(stage * STAGE_BYTES);
        const bc_u32 bs = as + A_BYTES;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const int mrow = wm * WTM + mi * 16;
            if (TRANS_A) {
                const int k = kk * 16 + (i8 >> 1) * 8 + r8, m = mrow + (i8 & 1) * 8;
                bc_ldsm_x4_t(as + (bc_u32)(k * A_RS + m * 2), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
            } else {
                const int m = mrow + (lane & 15), k = kk * 16 + (lane >> 4) * 8;
                bc_ldsm_x4(as + (bc_u32)(m * A_RS + k * 2), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
            }
        }
#pragma unroll
        for (int nj = 0; nj < NJ; nj += 2) {
            const int ncol = wn * WTN + nj * 8;
            if (TRANS_B) {
                const int n = ncol + r8 + ((lane >> 4) << 3), k = kk * 16 + ((lane >> 3) & 1) * 8;
                bc_ldsm_x4(bs + (bc_u32)(n * B_RS + k * 2), b[nj][0], b[nj][1], b[nj + 1][0], b[nj + 1][1]);
            } else {
                const int k = kk * 16 + r8 + ((lane >> 3) & 1) * 8, n = ncol + (lane >> 4) * 8;
                bc_ldsm_x4_t(bs + (bc_u32)(k * B_RS + n * 2), b[nj][0], b[nj][1], b[nj + 1][0], b[nj + 1][1]);
            }
        }
    };
    auto mma = [&](const bc_u32 (&a)[MI][4], const bc_u32 (&b)[NJ][2]) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int nj = 0; nj < NJ; ++nj)
                bc_mma16816<IS_BF16>(acc[mi][nj], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[nj][0], b[nj][1]);
    };
#if GEMM_DB
    // fragments double-buffered in registers: k-step kk+1 is read from shared memory while
    // kk multiplies, and the next stage's first k-step while this stage's last multiplies
    // (the stage wait moves before the last k-step)
    bc_u32 fa[2][MI][4], fb[2][NJ][2];
    bc_cp_async_wait<GEMM_STAGES - 2>();
    __syncthreads();
    if (KT > 0) frag(0, 0, fa[0], fb[0]);
    for (int kt = 0; kt < KT; ++kt) {
        if (kt + GEMM_STAGES - 1 < KT) load(kt + GEMM_STAGES - 1);
        bc_cp_async_commit();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const int cur = kk & 1;
            if (kk == BK / 16 - 1) {
                bc_cp_async_wait<GEMM_STAGES - 2>();
                __syncthreads();
                if (kt + 1 < KT) frag((kt + 1) % GEMM_STAGES, 0, fa[cur ^ 1], fb[cur ^ 1]);
            } else {
                frag(kt % GEMM_STAGES, kk + 1, fa[cur ^ 1], fb[cur ^ 1]);
            }
            mma(fa[cur], fb[cur]);
        }
    }
#else
    for (int kt = 0; kt < KT; ++kt) {
        bc_cp_async_wait<GEMM_STAGES - 2>();
        __syncthreads();
        if (kt + GEMM_STAGES - 1 < KT) load(kt + GEMM_STAGES - 1);
        bc_cp_async_commit();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            bc_u32 a[MI][4], b[NJ][2];
            frag(kt % GEMM_STAGES, kk, a, b);
            mma(a, b);
        }
    }
#endif
    bc_cp_async_wait<0>();

    const int g = lane >> 2, t = lane & 3;
    const bool pair = (ldc % 2 == 0) && ((((unsigned long long)C) & 3) == 0);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm * WTM + mi * 16 + g + h * 8;
            if (row >= M) continue;
            bc_u16* crow = C + (long long)row * ldc;
#pragma unroll
            for (int nj = 0; nj < NJ; ++nj) {
                const int col = n0 + wn * WTN + nj * 8 + 2 * t;
                float v0 = alpha * acc[mi][nj][2 * h], v1 = alpha * acc[mi][nj][2 * h + 1];
                bc_store_c2<IS_BF16>(crow, col, N, v0, v1, beta, pair);
            }
        }
    }
}
#else
// ---- SIMT: 64 x 64 tiles, 256 threads of 4 x 4, BK = 16, any strides ----------------------
template <typename T> BC_DEV float ld(const T* p);
template <> BC_DEV float ld<float>(const float* p) { return *p; }
template <> BC_DEV float ld<bc_half>(const bc_half* p) { return bc_half_to_float(p->x); }
template <> BC_DEV float ld<bc_bf16>(const bc_bf16* p) { return bc_bf16_to_float(p->x); }
template <typename T> BC_DEV void st(T* p, float v);
template <> BC_DEV void st<float>(float* p, float v) { *p = v; }
template <> BC_DEV void st<bc_half>(bc_half* p, float v) { p->x = bc_float_to_half(v); }
template <> BC_DEV void st<bc_bf16>(bc_bf16* p, float v) { p->x = bc_float_to_bf16(v); }

template <typename T>
BC_DEV void gemm_simt_impl(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K,
                           long long a_rs, long long a_cs, long long b_rs, long long b_cs, long long ldc, long long sa,
                           long long sb, long long sc, float alpha, float beta) {
    __shared__ float As[16][64 + 4];
    __shared__ float Bs[16][64 + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    A += blockIdx.z * sa;
    B += blockIdx.z * sb;
    C += blockIdx.z * sc;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = tid; i < 16 * 64; i += 256) {
            const int kk = i / 64, mm = i % 64;   // op(A)[m0+mm][k0+kk]
            As[kk][mm] = (m0 + mm < M && k0 + kk < K) ? ld(A + (m0 + mm) * a_rs + (k0 + kk) * a_cs) : 0.f;
            Bs[kk][mm] = (n0 + mm < N && k0 + kk < K) ? ld(B + (k0 + kk) * b_rs + (n0 + mm) * b_cs) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                a[i] = As[kk][ty + 16 * i];
                b[i] = Bs[kk][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = m0 + ty + 16 * i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = n0 + tx + 16 * j;
            if (col >= N) continue;
            T* p = C + row * ldc + col;
            float v = alpha * acc[i][j];
            if (beta != 0.f) v += beta * ld(p);
            st(p, v);
        }
    }
}
#endif

}  // namespace

#if !GEMM_SIMT
#define BC_GEMM_TC(DT, B)                                                                                       \
    extern "C" __global__ void __launch_bounds__(NTH, (NTH * MI * NJ <= 256 * 16 ? 2 : 1))                   \
        gemm_tc_##DT(const bc_u16* A, const bc_u16* Bm, bc_u16* C, int M, int N, int K, long long lda,         \
                     long long ldb, long long ldc, long long sa, long long sb, long long sc, float alpha,       \
                     float beta) {                                                                              \
        gemm_tc_impl<B>(A, Bm, C, M, N, K, lda, ldb, ldc, sa, sb, sc, alpha, beta);                             \
    }
BC_GEMM_TC(f16, 0)
BC_GEMM_TC(bf16, 1)
#else
#define BC_GEMM_SIMT(DT, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) gemm_simt_##DT(                                          \
        const T* A, const T* B, T* C, int M, int N, int K, long long a_rs, long long a_cs, long long b_rs,      \
        long long b_cs, long long ldc, long long sa, long long sb, long long sc, float alpha, float beta) {     \
        gemm_simt_impl<T>(A, B, C, M, N, K, a_rs, a_cs, b_rs, b_cs, ldc, sa, sb, sc, alpha, beta);              \
    }
BC_GEMM_SIMT(f32, float)
BC_GEMM_SIMT(f16, bc_half)
BC_GEMM_SIMT(bf16, bc_bf16)
#endif
