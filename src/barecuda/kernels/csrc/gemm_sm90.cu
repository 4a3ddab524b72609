// gemm_sm90.cu -- the Hopper (sm_90a) tensor-core GEMM: wgmma.mma_async on operands in shared
// memory, filled by cp.async (owner: G). C = alpha * op(A) op(B) + beta * C, strided batches,
// fp32 accumulation; the same entry arguments, layouts and operand requirements as gemm.cu's
// gemm_tc_* (16-byte aligned bases, leading dims and batch strides multiples of 8 elements,
// contiguous extents multiples of 8).
//
// Entry points: gemm_wg_f16, gemm_wg_bf16. Built for sm_90a only (wgmma exists on no other
// target): compiled for anything else (the CI compile test's sm_80/sm_90) each entry is a trap,
// and _matmul.py chooses these only on compute capability 9.0, where the registry builds this
// source for sm_90a (its ("BC_SM_A", 90) define).
//
// Tile: 128 x 256 x 64 per block of two warpgroups (256 threads); warpgroup w computes rows
// 64w..64w+63 with four m64n256k16 wgmmas per K tile (128 fp32 accumulators a thread).
// Shared memory: GEMM90_STAGES stages of A (16 KB) + B (32 KB) in the 128-byte swizzled layouts
// wgmma reads through its matrix descriptors:
//   K-major operand (k contiguous in memory: A, or B with TRANS_B): a 128-byte row per m/n index
//     (64 k values), 16-byte chunk c of row r at chunk c ^ (r % 8); descriptor SBO = 1024 (8 rows),
//     the k-step of 16 advances the start address by 32 bytes.
//   MN-major operand (m/n contiguous: B, or A with TRANS_A): blocks of 64 m/n values, each 64 k rows
//     of 128 bytes (8 KB), chunk c of k row r at chunk c ^ (r % 8); descriptor LBO = 8192 (the next
//     64 m/n values), SBO = 1024 (the next 8 k rows), the k-step advances by 2048 bytes; the wgmma
//     transposes it (imm-trans 1).
// Pipeline: tile kt+STAGES-2 is copied while tile kt multiplies and tile kt-1's wgmmas drain
// (wgmma.wait_group 1): every slot is written only after all warpgroups waited for its last reader.
#include "gemm_store.cuh"

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef GEMM90_STAGES
#define GEMM90_STAGES 4
#endif
#ifndef GEMM_GM
#define GEMM_GM 8   // grouped raster: this many row tiles share their column tiles in L2
#endif

namespace {

constexpr int NTH = 256;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int BM = 128, BN = 256, BK = 64, STAGES = GEMM90_STAGES;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
static_assert(STAGES >= 3, "GEMM90_STAGES: 3 or more (one slot drains, one multiplies)");

// One operand tile (O outer rows: m or n, by BK k values) into its swizzled slot at dst.
// K_MAJOR: k is contiguous in memory (rows along the outer index); else the outer index is.
template <int O_ROWS, int K_MAJOR>
BC_DEV void wg_load_tile(bc_u32 dst, const bc_u16* P, long long ld, int tid, int o0, int O, int k0, int K) {
    constexpr int CHUNKS = O_ROWS * BK / 8;
    static_assert(CHUNKS % NTH == 0, "whole rounds");
#pragma unroll
    for (int i = 0; i < CHUNKS / NTH; ++i) {
        const int c = tid + i * NTH;
        int o, k;
        bc_u32 off;
        if (K_MAJOR) {
            o = c >> 3;
            const int kc = c & 7;
            k = kc * 8;
            off = (bc_u32)(o * 128 + ((kc ^ (o & 7)) << 4));
        } else {
            constexpr int PER_ROW = O_ROWS / 8;
            k = c / PER_ROW;
            const int oc = c % PER_ROW;
            o = oc * 8;
            off = (bc_u32)((oc >> 3) * 8192 + k * 128 + (((oc & 7) ^ (k & 7)) << 4));
        }
        const bool ok = (o0 + o) < O && (k0 + k) < K;
        const bc_u16* src = ok ? P + (K_MAJOR ? (long long)(o0 + o) * ld + (k0 + k) : (long long)(k0 + k) * ld + (o0 + o))
                               : P;
        bc_cp_async16(dst + off, src, ok);
    }
}

// the shared memory matrix descriptor of a 128-byte swizzled operand
BC_DEV u64 wg_desc(bc_u32 addr, bc_u32 lbo, bc_u32 sbo) {
    return (u64)((addr >> 4) & 0x3FFFu) | ((u64)((lbo >> 4) & 0x3FFFu) << 16) | ((u64)((sbo >> 4) & 0x3FFFu) << 32) |
           (1ull << 62);
}

BC_DEV void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
BC_DEV void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> BC_DEV void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// keeps the compiler from moving accumulator reads/writes across the asynchronous wgmmas
BC_DEV void wg_keep(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define BC_WG_R8(i)                                                                                        \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define BC_WG_MMA(TY)                                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %132, 0;\n"                                                   \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {"                                \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "           \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "           \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "           \
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "           \
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "           \
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
                 "}, %128, %129, p, 1, 1, %130, %131;\n}\n"                                                   \
                 : BC_WG_R8(0), BC_WG_R8(8), BC_WG_R8(16), BC_WG_R8(24), BC_WG_R8(32), BC_WG_R8(40),          \
                   BC_WG_R8(48), BC_WG_R8(56), BC_WG_R8(64), BC_WG_R8(72), BC_WG_R8(80), BC_WG_R8(88),        \
                   BC_WG_R8(96), BC_WG_R8(104), BC_WG_R8(112), BC_WG_R8(120)                                  \
                 : "l"(da), "l"(db), "n"(TRANS_A), "n"(1 - TRANS_B), "r"(1))

// d += op(A)[64 x 16] op(B)[16 x 256] (the descriptors' tiles). imm-trans-a/b = 1 read an MN-major
// operand: A with TRANS_A (m contiguous), B without TRANS_B (B is K x N row-major: n contiguous)
template <int IS_BF16> BC_DEV void wg_mma(float (&d)[128], u64 da, u64 db);
template <> BC_DEV void wg_mma<0>(float (&d)[128], u64 da, u64 db) { BC_WG_MMA("f16"); }
template <> BC_DEV void wg_mma<1>(float (&d)[128], u64 da, u64 db) { BC_WG_MMA("bf16"); }
#undef BC_WG_MMA
#undef BC_WG_R8

template <int IS_BF16>
BC_DEV void gemm_wg_impl(const bc_u16* __restrict__ A, const bc_u16* __restrict__ B, bc_u16* __restrict__ C, int M,
                         int N, int K, long long lda, long long ldb, long long ldc, long long sa, long long sb,
                         long long sc, float alpha, float beta) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, wg = tid >> 7;
    // grouped raster over the tiles (GEMM_GM row tiles share their B tiles in L2)
    const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int width = GEMM_GM * num_n;
    const int first_m = (pid / width) * GEMM_GM;
    const int gsz = min(num_m - first_m, GEMM_GM);
    const int m0 = (first_m + (pid % width) % gsz) * BM, n0 = ((pid % width) / gsz) * BN;
    A += blockIdx.z * sa;
    B += blockIdx.z * sb;
    C += blockIdx.z * sc;
    // the swizzle pattern repeats every 1024 bytes: slots start on a 1024-byte boundary
    const bc_u32 sbase = (bc_smem_addr(smem) + 1023u) & ~1023u;
    const int KT = (K + BK - 1) / BK;

    auto load = [&](int kt) {
        const bc_u32 as = sbase + (bc_u32)((kt % STAGES) * STAGE_BYTES);
        const int k0 = kt * BK;
        wg_load_tile<BM, !TRANS_A>(as, A, lda, tid, m0, M, k0, K);
        wg_load_tile<BN, TRANS_B>(as + A_BYTES, B, ldb, tid, n0, N, k0, K);
    };

    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < KT) load(s);
        bc_cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        bc_cp_async_wait<STAGES - 3>();                  // this thread's copies of tile kt landed
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // ...and are visible to wgmma
        __syncthreads();                                 // everyone's; and tile kt-2's slot is free
        if (kt + STAGES - 2 < KT) load(kt + STAGES - 2);
        bc_cp_async_commit();
        const bc_u32 as = sbase + (bc_u32)((kt % STAGES) * STAGE_BYTES), bs = as + A_BYTES;
        wg_keep(d);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const u64 da = TRANS_A ? wg_desc(as + (bc_u32)(wg * 8192 + kk * 2048), 8192, 1024)
                                   : wg_desc(as + (bc_u32)(wg * 8192 + kk * 32), 16, 1024);
            const u64 db = TRANS_B ? wg_desc(bs + (bc_u32)(kk * 32), 16, 1024)
                                   : wg_desc(bs + (bc_u32)(kk * 2048), 8192, 1024);
            wg_mma<IS_BF16>(d, da, db);
        }
        wg_commit();
        wg_keep(d);
        wg_wait<1>();                                    // tile kt-1's wgmmas are done
    }
    wg_wait<0>();
    wg_keep(d);
    bc_cp_async_wait<0>();

    // accumulator j*4 + {0,1}: row 16*warp + g, cols 8j + 2t + {0,1}; j*4 + {2,3}: row + 8
    const int lane = tid & 31, warp = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const bool pair = (ldc % 2 == 0) && ((((unsigned long long)C) & 3) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + wg * 64 + warp * 16 + g + h * 8;
        if (row >= M) continue;
        bc_u16* crow = C + (long long)row * ldc;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int col = n0 + j * 8 + 2 * t;
            float v0 = alpha * d[j * 4 + 2 * h], v1 = alpha * d[j * 4 + 2 * h + 1];
            bc_store_c2<IS_BF16>(crow, col, N, v0, v1, beta, pair);
        }
    }
}
#endif

}  // namespace

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BC_GEMM_WG_BODY(B) gemm_wg_impl<B>(A, Bm, C, M, N, K, lda, ldb, ldc, sa, sb, sc, alpha, beta)
#else
#define BC_GEMM_WG_BODY(B) asm volatile("trap;")   // not an sm_90a build: never launched (_matmul.py)
#endif
#define BC_GEMM_WG(DT, B)                                                                                       \
    extern "C" __global__ void __launch_bounds__(NTH, 1)                                                       \
        gemm_wg_##DT(const bc_u16* A, const bc_u16* Bm, bc_u16* C, int M, int N, int K, long long lda,         \
                     long long ldb, long long ldc, long long sa, long long sb, long long sc, float alpha,       \
                     float beta) {                                                                              \
        BC_GEMM_WG_BODY(B);                                                                                     \
    }
BC_GEMM_WG(f16, 0)
BC_GEMM_WG(bf16, 1)
