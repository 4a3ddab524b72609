"""Q4_K batch-1 access-pattern floors (helper module, not a section; ``python -m
barecuda.bench.kernels_matvec_rows --q4-floors``): why the direct Q4_K matvec
(matvec.cu's matvec_<x>_tcd, matvec_core.cuh's mvc_tcd) reaches less of the spec bandwidth
than a linear read of the same bytes.

Floors, no math (each loaded word XORed into one value a thread, the block's XOR written once
to a sink):
  pattern   the op's exact accesses: its grid (a block a 16-row tile) and warps a block
            (_matvec.tcd_warps), warp wi takes the tile's super-blocks wi, wi + nw, ...; lane
            (g, t) loads of rows g and g + 8 the 16-byte head and bytes 8t..8t+7 of the four
            32-byte quant runs (ld.global.nc.L2::128B, as MVD4_LDQ), PF super-blocks ahead, and
            (x on) x's 16 bytes of each super-block as the op reads them.
  repacked  the same bytes in a tile-major order: super-block c of a 16-row tile is 2304
            contiguous bytes (the 16 heads, then 4 x 512 bytes: lane L = 4 g + t's uint4 j is
            bytes 8t..8t+7 of quant run j of rows g and g + 8), so each warp streams contiguous
            memory (6 16-byte loads a lane a super-block, the heads' 2 from one 256-byte run).
  "occ"     the same with dynamic shared memory that caps the blocks a multiprocessor at the
            op's (its registers' limit), so the floor has no more warps resident than the op.
Beside them: the read-only linear stream (rd_floor) and the op's row, and a prototype of the
real Q4_K math over the repacked layout (rep_mv: mvc_tcd's V 2 / subnormal loop, f16 x, with
the loads above; on sm_90 also rep_bk_mv_sS, the same math fed by cp.async.bulk through a
ring of S shared-memory slots a warp), checked against the op on random blocks before it is
timed. H200 rows of 2026-11-27: docs/kernels.md, "Measured: Q4_K access-pattern floors".
"""
from barecuda.bench._kernel_timing import _time_plans, load_source

# the floors: no headers, templates over PF (super-blocks in flight a warp) and the layout
_FLOOR_SRC = r"""
typedef unsigned char u8;
#define LDQ "ld.global.nc.L2::128B"
__device__ __forceinline__ uint4 ld16(const u8* p) {
    uint4 v;
    asm volatile(LDQ ".v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ld8(const u8* p) {
    uint2 v;
    asm volatile(LDQ ".v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
struct Regs { uint4 h[2]; uint2 q[2][4]; };
__device__ __forceinline__ unsigned fold(const Regs& r) {
    unsigned a = r.h[0].x ^ r.h[0].y ^ r.h[0].z ^ r.h[0].w ^ r.h[1].x ^ r.h[1].y ^ r.h[1].z ^ r.h[1].w;
#pragma unroll
    for (int j = 0; j < 4; ++j) a ^= r.q[0][j].x ^ r.q[0][j].y ^ r.q[1][j].x ^ r.q[1][j].y;
    return a;
}
// REP 0: the op's layout (row-major GGUF rows); 1: tile-major repacked (2304 bytes a tile's super-block)
template <int PF, int REP>
__device__ void floor_body(const u8* __restrict__ W, const unsigned short* __restrict__ x, int N, int K,
                           unsigned* __restrict__ sink, int rx) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int n0 = blockIdx.x * 16, nblk = K / 256;
    const long long rb = (long long)nblk * 144;
    const u8* r0 = W + (long long)min(n0 + g, N - 1) * rb;
    const u8* r1 = W + (long long)min(n0 + g + 8, N - 1) * rb;
    const u8* tile = W + (long long)blockIdx.x * nblk * 2304;
    auto load = [&](int c, Regs& R) {
        if (c < nblk) {
            if (REP) {
                const u8* b = tile + (long long)c * 2304;
                R.h[0] = ld16(b + 16 * g);
                R.h[1] = ld16(b + 16 * (g + 8));
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint4 u = ld16(b + 256 + 512 * j + 16 * lane);
                    R.q[0][j] = make_uint2(u.x, u.y);
                    R.q[1][j] = make_uint2(u.z, u.w);
                }
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u8* b = (h ? r1 : r0) + (long long)c * 144;
                    R.h[h] = ld16(b);
#pragma unroll
                    for (int j = 0; j < 4; ++j) R.q[h][j] = ld8(b + 16 + 32 * j + 8 * t);
                }
            }
        }
    };
    Regs buf[PF];
#pragma unroll
    for (int p = 0; p < PF; ++p) load(wi + p * nw, buf[p]);
    unsigned a = 0u;
    for (int c0 = wi; c0 < nblk; c0 += PF * nw) {
#pragma unroll
        for (int p = 0; p < PF; ++p) {
            const int c = c0 + p * nw;
            if (c >= nblk) break;
            if (rx) {
                const uint4 xv = *reinterpret_cast<const uint4*>(x + (long long)c * 256 + 32 * ((g >> 1) + 4 * (g & 1)) + 8 * t);
                a ^= xv.x ^ xv.y ^ xv.z ^ xv.w;
            }
            a ^= fold(buf[p]);
            load(c + PF * nw, buf[p]);
        }
    }
    __shared__ unsigned sa;
    if (threadIdx.x == 0) sa = 0u;
    __syncthreads();
    atomicXor(&sa, a);
    __syncthreads();
    if (threadIdx.x == 0) sink[blockIdx.x] = sa;
}
#define FLOOR(NAME, PF, REP)                                                                              \
    extern "C" __global__ void __launch_bounds__(512) NAME(const u8* W, const unsigned short* x, int N, int K, \
                                                           unsigned* sink, int rx) {                      \
        floor_body<PF, REP>(W, x, N, K, sink, rx);                                                        \
    }
FLOOR(pat_pf1, 1, 0)
FLOOR(pat_pf2, 2, 0)
FLOOR(pat_pf4, 4, 0)
FLOOR(rep_pf1, 1, 1)
FLOOR(rep_pf2, 2, 1)
FLOOR(rep_pf4, 4, 1)
"""

# the prototype: mvc_tcd (V 2, MVD4_SUB, f16 x, no epilogue) with the repacked loads; the
# helpers (MvtQ, mvt_*, MvdRegs, mvd_ld16, mvc_tcd_sum) are the shipped ones, by -I csrc
_PROTO_SRC = r"""
#define WFMT 12
#include "common.cuh"
#include "quant.cuh"
#include "matvec_core.cuh"
// one super-block of rows g, g + 8 (R, lane's share in the repacked order) into acc: mvc_tcd's V 2 math
__device__ __forceinline__ void rep_sb(const MvdRegs& R, const bc_half* __restrict__ x, int c, float dq, float (&acc)[4]) {
    using Q = MvtQ<BC_Q4_K>;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const bc_half* xp = x + (long long)c * 256 + 32 * ((g >> 1) + 4 * (g & 1));
    const uint4 xv = *reinterpret_cast<const uint4*>(xp + 8 * t);
    const u32 X[4] = {xv.x, xv.y, xv.z, xv.w};
    float sx = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float lo, hi;
        bc_unpack2<0>(X[i], lo, hi);
        sx += lo + hi;
    }
    sx += __shfl_xor_sync(BC_FULL_MASK, sx, 1);
    sx += __shfl_xor_sync(BC_FULL_MASK, sx, 2);
    float Dx[4];
    Dx[0] = Dx[2] = __shfl_sync(BC_FULL_MASK, sx, 8 * t);
    Dx[1] = Dx[3] = __shfl_sync(BC_FULL_MASK, sx, 8 * t + 4);
    u32 B[2][2];
#pragma unroll
    for (int sl = 0; sl < 2; ++sl) {
        B[sl][0] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x5410u);
        B[sl][1] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x7632u);
    }
    float sv[2][2][3];
#pragma unroll
    for (int h = 0; h < 2; ++h) Q::scales_pair(R.h[h], t, sv[h], dq);
    float D[4] = {0.f, 0.f, 0.f, 0.f}, D1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int gi = 0; gi < 8; ++gi) {
        u32 b[2][2];
        mvt_mask(B, g == (gi < 4 ? 2 * gi : 2 * gi - 7), b);
        u32 Ag[4], Ah[4];
        Q::quants_sub(R.q[0][gi >> 1], gi, Ag);
        Q::quants_sub(R.q[1][gi >> 1], gi, Ah);
        mvt_dot<0>(D, D1, Ag, Ah, b);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float* sc = sv[i >> 1][i & 1];
        acc[i] = fmaf(sc[2], Dx[i], fmaf(sc[0], D[i] + D1[i], acc[i]));
    }
}
// the warp's rows g, g + 8 reduced over the block's warps and stored
__device__ __forceinline__ void rep_store(float* red, const float (&acc)[4], bc_half* __restrict__ y, int N) {
    const int lane = threadIdx.x & 31;
    float v[1][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float a = acc[2 * h] + acc[2 * h + 1];
        a += __shfl_xor_sync(BC_FULL_MASK, a, 1);
        a += __shfl_xor_sync(BC_FULL_MASK, a, 2);
        v[0][h] = a;
    }
    if (!mvc_tcd_sum<1>(red, v) || (lane & 3)) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int n = blockIdx.x * 16 + (lane >> 2) + 8 * h;
        if (n < N) bc_store(y + n, v[0][h]);
    }
}
// rep_mv keeps its own copy of rep_sb's math, as measured: written through rep_sb, ptxas gives
// it 75 registers instead of 70 (6 blocks of 4 warps a multiprocessor instead of 7)
template <int PF>
__device__ void rep_mv(const u8* __restrict__ W, const bc_half* __restrict__ x, bc_half* __restrict__ y, int N, int K) {
    using Q = MvtQ<BC_Q4_K>;
    __shared__ float red[16 * 2 * 32];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int n0 = blockIdx.x * 16;
    const float dq = (t & 1) ? 1048576.f : 16777216.f;
    const int nblk = K / 256;
    const u8* tile = W + (long long)blockIdx.x * nblk * 2304;
    auto load = [&](int c, MvdRegs& R) {
        if (c < nblk) {
            const u8* b = tile + (long long)c * 2304;
            R.h[0] = mvd_ld16(b + 16 * g);
            R.h[1] = mvd_ld16(b + 16 * (g + 8));
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint4 u = mvd_ld16(b + 256 + 512 * j + 16 * lane);
                R.q[0][j] = make_uint2(u.x, u.y);
                R.q[1][j] = make_uint2(u.z, u.w);
            }
        }
    };
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    MvdRegs buf[PF];
#pragma unroll
    for (int p = 0; p < PF; ++p) load(wi + p * nw, buf[p]);
    for (int c0 = wi; c0 < nblk; c0 += PF * nw) {
#pragma unroll
        for (int p = 0; p < PF; ++p) {
            const int c = c0 + p * nw;
            if (c >= nblk) break;
            const bc_half* xp = x + (long long)c * 256 + 32 * ((g >> 1) + 4 * (g & 1));
            const uint4 xv = *reinterpret_cast<const uint4*>(xp + 8 * t);
            const u32 X[4] = {xv.x, xv.y, xv.z, xv.w};
            float sx = 0.f;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float lo, hi;
                bc_unpack2<0>(X[i], lo, hi);
                sx += lo + hi;
            }
            sx += __shfl_xor_sync(BC_FULL_MASK, sx, 1);
            sx += __shfl_xor_sync(BC_FULL_MASK, sx, 2);
            float Dx[4];
            Dx[0] = Dx[2] = __shfl_sync(BC_FULL_MASK, sx, 8 * t);
            Dx[1] = Dx[3] = __shfl_sync(BC_FULL_MASK, sx, 8 * t + 4);
            u32 B[2][2];
#pragma unroll
            for (int sl = 0; sl < 2; ++sl) {
                B[sl][0] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x5410u);
                B[sl][1] = mvt_prmt(X[2 * sl], X[2 * sl + 1], 0x7632u);
            }
            float sv[2][2][3];
#pragma unroll
            for (int h = 0; h < 2; ++h) Q::scales_pair(buf[p].h[h], t, sv[h], dq);
            float D[4] = {0.f, 0.f, 0.f, 0.f}, D1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int gi = 0; gi < 8; ++gi) {
                u32 b[2][2];
                mvt_mask(B, g == (gi < 4 ? 2 * gi : 2 * gi - 7), b);
                u32 Ag[4], Ah[4];
                Q::quants_sub(buf[p].q[0][gi >> 1], gi, Ag);
                Q::quants_sub(buf[p].q[1][gi >> 1], gi, Ah);
                mvt_dot<0>(D, D1, Ag, Ah, b);
            }
            load(c + PF * nw, buf[p]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float* sc = sv[i >> 1][i & 1];
                acc[i] = fmaf(sc[2], Dx[i], fmaf(sc[0], D[i] + D1[i], acc[i]));
            }
        }
    }
    float v[1][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float a = acc[2 * h] + acc[2 * h + 1];
        a += __shfl_xor_sync(BC_FULL_MASK, a, 1);
        a += __shfl_xor_sync(BC_FULL_MASK, a, 2);
        v[0][h] = a;
    }
    if (!mvc_tcd_sum<1>(red, v) || (lane & 3)) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int n = n0 + (lane >> 2) + 8 * h;
        if (n < N) bc_store(y + n, v[0][h]);
    }
}
// The same math with the super-blocks brought into shared memory by the bulk copy engine (sm_90):
// each warp owns a ring of S slots of 2304 bytes (dynamic shared memory: 1024 bytes of mbarriers,
// then warp wi's slots at 1024 + wi * S * 2304), lane 0 issues one cp.async.bulk a super-block
// (the repacked order: a tile's super-block is 2304 contiguous bytes), every lane waits on the
// slot's mbarrier, reads its 6 vectors into registers, the warp syncs and lane 0 refills the slot
// with the super-block S turns ahead before the math: S copies in flight a warp, no registers held.
__device__ __forceinline__ u32 bk_sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bk_issue(u32 dst, const u8* src, u32 bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(2304u) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(2304u), "r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void bk_wait(u32 bar, u32 parity) {
#if __CUDA_ARCH__ >= 900
    u32 done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
#endif
}
template <int S>
__device__ void rep_bk_mv(const u8* __restrict__ W, const bc_half* __restrict__ x, bc_half* __restrict__ y, int N, int K) {
#if __CUDA_ARCH__ >= 900
    __shared__ float red[16 * 2 * 32];
    extern __shared__ __align__(128) u8 bk_sm[];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, wi = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float dq = (t & 1) ? 1048576.f : 16777216.f;
    const int nblk = K / 256;
    const u8* tile = W + (long long)blockIdx.x * nblk * 2304;
    const u32 bar0 = bk_sa(bk_sm) + 8u * (u32)(wi * S);
    u8* ring = bk_sm + 1024 + wi * S * 2304;
    const u32 ring_sa = bk_sa(ring);
    if (lane == 0) {
#pragma unroll
        for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar0 + 8u * s) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const int c = wi + s * nw;
            if (c < nblk) bk_issue(ring_sa + 2304u * s, tile + (long long)c * 2304, bar0 + 8u * s);
        }
    }
    __syncwarp();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int s = 0;
    u32 par = 0;
    for (int c = wi; c < nblk; c += nw) {
        bk_wait(bar0 + 8u * s, par);
        const u8* b = ring + 2304 * s;
        MvdRegs R;
        R.h[0] = *reinterpret_cast<const uint4*>(b + 16 * g);
        R.h[1] = *reinterpret_cast<const uint4*>(b + 16 * (g + 8));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint4 u = *reinterpret_cast<const uint4*>(b + 256 + 512 * j + 16 * lane);
            R.q[0][j] = make_uint2(u.x, u.y);
            R.q[1][j] = make_uint2(u.z, u.w);
        }
        __syncwarp();
        if (lane == 0 && c + S * nw < nblk) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            bk_issue(ring_sa + 2304u * s, tile + (long long)(c + S * nw) * 2304, bar0 + 8u * s);
        }
        rep_sb(R, x, c, dq, acc);
        if (++s == S) { s = 0; par ^= 1u; }
    }
    rep_store(red, acc, y, N);
#endif
}
extern "C" __global__ void __launch_bounds__(512) rep_mv_pf1(const u8* W, const bc_half* x, bc_half* y, int N, int K) {
    rep_mv<1>(W, x, y, N, K);
}
extern "C" __global__ void __launch_bounds__(512) rep_mv_pf2(const u8* W, const bc_half* x, bc_half* y, int N, int K) {
    rep_mv<2>(W, x, y, N, K);
}
#define REP_BK(S)                                                                                             \
    extern "C" __global__ void __launch_bounds__(512) rep_bk_mv_s##S(const u8* W, const bc_half* x, bc_half* y, \
                                                                     int N, int K) {                          \
        rep_bk_mv<S>(W, x, y, N, K);                                                                          \
    }
REP_BK(2)
REP_BK(3)
REP_BK(4)
"""

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 4096))


def repack(raw, n, k):
    """The repacked (tile-major) bytes of n x k Q4_K weights ``raw`` (numpy uint8, GGUF order);
    n % 16 == 0. Super-block c of tile T at (T * nblk + c) * 2304: the 16 rows' heads, then
    uint4 j of lane 4 g + t at 256 + 512 j + 16 (4 g + t): bytes 8t..8t+7 of quant run j of
    rows g and g + 8."""
    import numpy as np
    nb, nt = k // 256, n // 16
    w = raw.reshape(nt, 16, nb, 144)
    heads = w[:, :, :, :16].transpose(0, 2, 1, 3).reshape(nt, nb, 256)
    q = w[:, :, :, 16:].reshape(nt, 2, 8, nb, 4, 4, 8)          # T, h, g, c, j, t, byte
    q = q.transpose(0, 3, 4, 2, 5, 1, 6).reshape(nt, nb, 2048)  # T, c, j, g, t, h, byte
    return np.ascontiguousarray(np.concatenate([heads, q], axis=2)).reshape(-1)


def _random_q4k(n, k, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n * k // 256, 144), dtype=np.uint8)
    dm = rng.uniform(1e-3, 4e-3, size=(n * k // 256, 2)).astype(np.float16)
    raw[:, 0:4] = dm.view(np.uint8).reshape(-1, 4)
    return raw.reshape(-1)


def _match_blocks(kern, threads, target):
    """Dynamic shared memory (bytes) that caps ``kern`` at ``target`` blocks a multiprocessor,
    or 0 when it is at or under that already (or the driver cannot say)."""
    try:
        if kern.max_active_blocks_per_sm(threads) <= target:
            return 0
        smem = 0
        for kb in range(1, 228):
            smem = kb * 1024
            if smem > kern.max_dynamic_shared_memory:      # 48 KB less the kernel's static bytes
                kern.set_max_dynamic_shared_memory(smem)
            if kern.max_active_blocks_per_sm(threads, smem) <= target:
                return smem
    except Exception:   # noqa: BLE001 -- a bench row: the unmatched floor then
        return 0
    return 0


def q4_floor_rows(bc, s, shapes=SHAPES, proto=True):
    """Per shape: the linear read-only floor, the op's row, the pattern / repacked floors (the
    op's PF, PF 4, x on / off, occupancy matched), and (``proto``) the repacked prototype,
    checked against the op first (label says the max error relative to the op's max |y|)."""
    from barecuda.bench.kernels_matvec_rows import _floor_kernel, _quant_bufs
    from barecuda.kernels import _args as A
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    from barecuda.kernels import _registry
    mod = load_source(bc, _FLOOR_SRC, "q4k_floors.cu")
    pmod = None
    if proto:
        try:
            pmod = load_source(bc, _PROTO_SRC, "q4k_rep_mv.cu", options=("-std=c++17", f"-I{_registry.CSRC}"))
        except Exception as exc:   # noqa: BLE001
            print(f"  prototype does not build: {type(exc).__name__}: {str(exc)[:400]}", flush=True)
    sms = A.sm_count(0)
    out = []
    for n, k in shapes:
        wbytes, bufs = _quant_bufs(bc, s, n, k, 256, 144)
        x = bc.empty((1, k), "float16", stream=s)
        x.memset(0x1c, stream=s)
        y = bc.empty((1, n), "float16", stream=s)
        nbytes = wbytes + 2 * (n + k)
        tag = f"{n}x{k}"
        # the op, then the linear floor (one pass, as dense_rows' floor)
        plans = [M.plan_matvec(D.QuantWeight(b, "q4_k", (n, k)), x, out=y, stream=s) for b in bufs]
        out.append((f"q4f {tag} op matvec q4_k x f16 b1", _time_plans(bc, s, plans), nbytes, None))
        del plans
        n16, sink = wbytes // 16, bc.zeros((max(4, n // 16 + 1),), "uint32", stream=s)
        plans = [_floor_kernel().bind(-(-n16 // (256 * 4)), 256, b, n16, sink, stream=s) for b in bufs]
        out.append((f"q4f {tag} floor linear read-only (rd_floor, one pass)", _time_plans(bc, s, plans), wbytes, None))
        del plans
        nw = M.tcd_warps(n, k, sms)
        pf = dict(M.tcd_defines("q4_k", k)).get("MVD_PF", 2)
        opk = _registry.get("matvec.cu", "matvec_f16_tcd", (("WFMT", 12),) + M._quant_tuning("q4_k") + M.tcd_defines("q4_k", k))
        try:
            ob = opk.max_active_blocks_per_sm(32 * nw)
        except Exception:   # noqa: BLE001
            ob = 0
        grid = -(-n // 16)
        for lay in ("pat", "rep"):
            for p, rx, occ in ((pf, 1, False), (pf, 0, False), (pf, 1, True), (4, 1, False), (4, 1, True)):
                kern = mod.get_kernel(f"{lay}_pf{p}")
                smem = _match_blocks(kern, 32 * nw, ob) if occ and ob else 0
                if occ and not smem:
                    continue
                plans = [kern.bind(grid, 32 * nw, b, x, n, k, sink, rx, stream=s, shared_mem=smem) for b in bufs]
                name = "pattern (the op's)" if lay == "pat" else "repacked (tile-major)"
                lab = (f"q4f {tag} floor {name} {nw} warps PF={p}{' +x' if rx else ' no x'}"
                       + (f" occ {ob} blk/SM" if occ else ""))
                out.append((lab, _time_plans(bc, s, plans), nbytes if rx else wbytes, None))
                del plans
        if pmod is not None:
            try:
                out += _proto_rows(bc, s, pmod, n, k, nw, pf, bufs, x, y, nbytes, tag)
            except Exception as exc:   # noqa: BLE001
                print(f"  prototype {tag} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        del bufs
    return out


def _proto_rows(bc, s, pmod, n, k, nw, pf, bufs, x, y, nbytes, tag):
    """rep_mv on random Q4_K blocks against the op (the same blocks, GGUF order), then timed
    over the rotation (memset bytes: the layout does not change what they hold)."""
    import numpy as np
    from barecuda.kernels import _dequant as D
    from barecuda.kernels import _matvec as M
    raw = _random_q4k(n, k, seed=n + k)
    rng = np.random.default_rng(1)
    xh = rng.uniform(-1.0, 1.0, size=(1, k)).astype(np.float16)
    wd, wr, xd = bc.to_device(raw), bc.to_device(repack(raw, n, k)), bc.to_device(xh)
    y0 = bc.empty((1, n), "float16", stream=s)
    y1 = bc.empty((1, n), "float16", stream=s)
    M.matvec(D.QuantWeight(wd, "q4_k", (n, k)), xd, out=y0, stream=s)
    out = []
    major = bc.Device().compute_capability[0]
    variants = [(f"rep_mv_pf{p}", f"PF={p}", 0) for p in sorted({pf, 1, 2})]
    if major >= 9:       # the bulk-copy rings (cp.async.bulk): S slots of 2304 bytes a warp
        variants += [(f"rep_bk_mv_s{S}", f"bulk ring S={S}", 1024 + nw * S * 2304) for S in (2, 3, 4)]
    for name, what, smem in variants:
        kern = pmod.get_kernel(name)
        if smem > kern.max_dynamic_shared_memory:
            kern.set_max_dynamic_shared_memory(smem)
        y1.memset(0, stream=s)
        kern.launch(-(-n // 16), 32 * nw, wr, xd, y1, n, k, stream=s, shared_mem=smem)
        s.synchronize()
        a = y0.view("uint16", (1, n)).to_numpy().view(np.float16).astype(np.float64)
        b = y1.view("uint16", (1, n)).to_numpy().view(np.float16).astype(np.float64)
        err = float(np.max(np.abs(a - b)) / max(1e-30, float(np.max(np.abs(a)))))
        plans = [kern.bind(-(-n // 16), 32 * nw, w, x, y, n, k, stream=s, shared_mem=smem) for w in bufs]
        try:
            regs = f" [{kern.attribute('num_regs')} regs, {kern.max_active_blocks_per_sm(32 * nw, smem)} blk/SM]"
        except Exception:   # noqa: BLE001
            regs = ""
        out.append((f"q4f {tag} PROTOTYPE {name} repacked {nw} warps {what}{regs} max|err|/max|y| vs op {err:.1e}",
                    _time_plans(bc, s, plans), nbytes, None))
        del plans
    return out


def q4_floors_main():
    """``--q4-floors``: the rows above at the 4 shapes, printed as they come."""
    import barecuda as bc
    from barecuda.bench._kernel_timing import _spec, copy_gbs
    from barecuda.bench.kernels_matvec_rows import _print_group
    s = bc.Stream()
    card, sp = _spec(bc)
    print(f"  device copy: {copy_gbs(bc, s):.0f} GB/s on {card}", flush=True)
    for shp in SHAPES:
        _print_group(lambda: q4_floor_rows(bc, s, shapes=(shp,)), sp)
