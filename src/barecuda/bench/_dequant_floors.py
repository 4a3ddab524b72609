"""The no-math floors beside the dequantize rows of ``kernels_matvec`` (helper module, not a
section): kernels that read R bytes and write W bytes at a dequantize format's read:write mix,
in the dequantize kernels' load/store shape and in other shapes, and the device copy at the
rows' size. ``kernels_matvec_rows`` imports the row functions from here."""
from barecuda.bench._kernel_timing import _time_plans, load_source


def _weights(bc, s, nbytes, make):
    from barecuda.bench.kernels_matvec_rows import _weights as w
    return w(bc, s, nbytes, make)


# The byte-mix floor of the dequantize rows: a kernel that reads R bytes and writes W bytes with
# no math (16-byte loads and stores, a block a tile of 8 x 128 output vectors and the matching
# share of input vectors, contiguous, every load of a thread issued before its stores, as the
# dequantize kernels do), at each format's R:W -> f16 (Q4_K 144:512, ...), beside pure reads
# and pure writes: what this load/store structure gets from HBM at that mix.
_MIX_SRC = r"""
extern "C" __global__ void __launch_bounds__(128) mix(const uint4* __restrict__ in, uint4* __restrict__ out,
                                                      long long tin, long long tout, long long ntiles, int rd) {
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        uint4 v[8];                     // a thread's input vectors (tin <= 1024), all loads issued first
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k * 128 + threadIdx.x < tin)
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
                             : "l"(in + t * tin + k * 128 + threadIdx.x));
        uint4 f = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k * 128 + threadIdx.x < tin) { f.x ^= v[k].x; f.y ^= v[k].y; f.z ^= v[k].z; f.w ^= v[k].w; }
        if (rd) {                       // pure read: the loads stay (a store that never happens)
            if (f.x == 0x12345678u && f.y == 0x9abcdef0u) out[0] = f;
            continue;
        }
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k * 128 + threadIdx.x < tout) out[t * tout + k * 128 + threadIdx.x] = make_uint4(f.x ^ k, f.y, f.z, f.w);
    }
}
"""
_MIXES = [("q4_k", 144, 256), ("q6_k", 210, 256), ("q8_0", 34, 32), ("q4_0", 18, 32), ("q4_1", 20, 32)]


def dequant_floor_rows(bc, s, shape=(14336, 4096), mixes=_MIXES, extremes=True):
    """The mix kernel above at each format's -> f16 byte mix of an n x k tensor (rows labelled
    "floor: ..."), and (extremes) at read only, write only and read = write."""
    from barecuda.kernels import _args as A
    kern = load_source(bc, _MIX_SRC, "dequant_mix.cu").get_kernel("mix")
    n, k = shape
    out = []
    cases = [(f"floor: no math, {f.upper()}'s read:write (-> f16)", bb / (qk * 2)) for f, bb, qk in mixes]
    if extremes:
        cases += [("floor: no math, read = write", 1.0), ("floor: no math, write only", 0.0),
                  ("floor: no math, read only", None)]
    wbytes = n * k * 2
    for label, ratio in cases:
        tout = 1024                                         # 16-byte vectors a tile written
        tin = 1024 if ratio is None else max(0, round(tout * ratio))
        rd = ratio is None
        ntiles = wbytes // (16 * tout)
        rbytes, wb = ntiles * tin * 16, (0 if rd else ntiles * tout * 16)
        ins = _weights(bc, s, rbytes + wb, lambda: bc.empty((max(16, rbytes),), "uint8", stream=s))
        for b in ins:
            b.memset(0x1c, stream=s)
        y = bc.empty((max(16, wb),), "uint8", stream=s)
        grid = max(1, min(ntiles, A.sm_count(0) * 16)) if rd else ntiles
        plans = [kern.bind(grid, 128, b, y, tin, tout, ntiles, int(rd), stream=s) for b in ins]
        us = _time_plans(bc, s, plans)
        out.append((label, us, rbytes + wb, None))
        del plans, ins
    return out


# The dequantize rows' floor in other load/store shapes (helper N, 2026-11-27 09:4x): no math, at
# a format's read:write byte mix, each a candidate shape for the kernels. mixw: warp tiles (256
# output vectors of 16 bytes, 8 a lane, and ti <= 256 input vectors read first), a warp a tile
# on a full grid or a grid-stride loop over a persistent grid; flags: bits 0-1 the store (0 plain,
# 1 st.global.cs, 2 an L2 evict_first cache policy, 3 evict_last), bits 2-3 the load (0
# ld.global.nc.L1::no_allocate, 1 + .L2::256B, 2 + an L2 evict_first policy), bit 4 pipelined (the
# next tile's loads issued before this tile's stores). mixt (sm_90): block tiles of 512 output
# vectors, the input read by bulk copies (cp.async.bulk, thread 0) into a ring of 3 shared-memory
# stages completing on mbarriers; bit 5: the output written by a bulk copy from shared memory
# too. copy1: a thread a vector (read = write).
_SHAPE_SRC = r"""
typedef unsigned long long u64;
__device__ __forceinline__ u64 pol(int evict_last) {
    u64 p;
    if (evict_last) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    else asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint4 ldv(const uint4* p, int op, u64 pl) {
    uint4 v;
    if (op == 1)
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (op == 2)
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pl));
    else
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void stv(uint4* p, uint4 v, int op, u64 pl) {
    if (op == 1)
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    else if (op >= 2)
        asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
                     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(pl) : "memory");
    else
        *p = v;
}
extern "C" __global__ void __launch_bounds__(256) mixw(const uint4* __restrict__ in, uint4* __restrict__ out,
                                                       int ti, long long ntiles, int flags) {
    const int lane = threadIdx.x & 31, sop = flags & 3, lop = (flags >> 2) & 3;
    const bool pipe = (flags & 16) != 0;
    const long long W = (long long)gridDim.x * (blockDim.x >> 5);
    long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const u64 pst = pol(sop == 3), pld = pol(0);
    uint4 v[8], nv[8];
    auto load = [&](long long tt, uint4* d) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k * 32 + lane < ti) d[k] = ldv(in + tt * ti + k * 32 + lane, lop, pld);
    };
    if (t < ntiles) load(t, v);
    for (; t < ntiles; t += W) {
        if (pipe && t + W < ntiles) load(t + W, nv);
        uint4 f = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k * 32 + lane < ti) { f.x ^= v[k].x; f.y ^= v[k].y; f.z ^= v[k].z; f.w ^= v[k].w; }
#pragma unroll
        for (int k = 0; k < 8; ++k) stv(out + t * 256 + k * 32 + lane, make_uint4(f.x ^ k, f.y, f.z, f.w), sop, pst);
        if (pipe) {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = nv[k];
        } else if (t + W < ntiles) {
            load(t + W, v);
        }
    }
}
extern "C" __global__ void __launch_bounds__(256) copy1(const uint4* __restrict__ in, uint4* __restrict__ out, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(in + i));
        out[i] = v;
    }
}
#define NS 3
#define TO 512
__device__ __forceinline__ unsigned sa(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
extern "C" __global__ void __launch_bounds__(128) mixt(const uint4* __restrict__ in, uint4* __restrict__ out,
                                                       int ti, long long ntiles, int flags) {
#if __CUDA_ARCH__ >= 900
    __shared__ __align__(128) uint4 sin[NS][TO];
    __shared__ __align__(128) uint4 sout[2][TO];
    __shared__ __align__(8) u64 bar[NS];
    const int tid = threadIdx.x, sop = flags & 3;
    const bool bulk_out = (flags & 32) != 0;
    const unsigned bytes = (unsigned)ti * 16u;
    const u64 pst = pol(sop == 3);
    if (tid == 0) {
        for (int i = 0; i < NS; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&bar[i])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](long long tt, int st) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sa(&bar[st])), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(sa(sin[st])), "l"(in + tt * ti), "r"(bytes), "r"(sa(&bar[st])) : "memory");
    };
    if (tid == 0)
        for (int i = 0; i < NS; ++i) {
            const long long tt = blockIdx.x + (long long)i * gridDim.x;
            if (tt < ntiles) issue(tt, i);
        }
    long long k = 0;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x, ++k) {
        const int st = (int)(k % NS);
        const unsigned ph = (unsigned)((k / NS) & 1);
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(sa(&bar[st])), "r"(ph) : "memory");
        uint4 f = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int j = 0; j < TO / 128; ++j)
            if (j * 128 + tid < ti) {
                const uint4 v = sin[st][j * 128 + tid];
                f.x ^= v.x; f.y ^= v.y; f.z ^= v.z; f.w ^= v.w;
            }
        if (bulk_out && tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        __syncthreads();                 // stage st read by every thread; sout[k & 1] free again
        if (tid == 0) {
            const long long tn = t + (long long)NS * gridDim.x;
            if (tn < ntiles) issue(tn, st);
        }
        if (bulk_out) {
            uint4* so = sout[k & 1];
#pragma unroll
            for (int j = 0; j < TO / 128; ++j) so[j * 128 + tid] = make_uint4(f.x ^ j, f.y, f.z, f.w);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncthreads();
            if (tid == 0) {
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                             :: "l"(out + t * TO), "r"(sa(so)), "r"((unsigned)(TO * 16)) : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
        } else {
#pragma unroll
            for (int j = 0; j < TO / 128; ++j) stv(out + t * TO + j * 128 + tid, make_uint4(f.x ^ j, f.y, f.z, f.w), sop, pst);
        }
    }
    if (bulk_out && tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}
"""
_SHAPE_KERN: list = []


def _shape_module(bc):
    if not _SHAPE_KERN:
        _SHAPE_KERN.append(load_source(bc, _SHAPE_SRC, "dequant_shape.cu"))
    return _SHAPE_KERN[0]


# (label, kernel, flags, grid mode: "flat" a warp (mixw) a tile, "wave" blocks a multiprocessor x SMs)
SHAPES = [("mixw flat", "mixw", 0, "flat"), ("mixw flat .cs", "mixw", 1, "flat"),
          ("mixw flat st evict_first", "mixw", 2, "flat"), ("mixw flat ld L2::256B", "mixw", 4, "flat"),
          ("mixw wave", "mixw", 0, "wave"), ("mixw wave pipelined", "mixw", 16, "wave"),
          ("mixw wave pipelined .cs", "mixw", 17, "wave"), ("mixw wave pipelined st evict_first", "mixw", 18, "wave"),
          ("mixw wave pipelined st evict_last", "mixw", 19, "wave"), ("mixw wave pipelined ld L2::256B", "mixw", 20, "wave"),
          ("mixw wave pipelined ld evict_first", "mixw", 24, "wave"),
          ("mixw wave pipelined ld evict_first st evict_first", "mixw", 26, "wave"),
          ("mixt bulk loads, plain stores", "mixt", 0, "wave"), ("mixt bulk loads, .cs stores", "mixt", 1, "wave"),
          ("mixt bulk loads + bulk stores", "mixt", 32, "wave")]


def dequant_shape_floor_rows(bc, s, shape=(14336, 4096), mixes=(("q4_k", 144, 256), ("q8_0", 34, 32)), shapes=SHAPES,
                             rw=True, copies=True, scale=(1,), threads=(128,)):
    """The no-math floor in the SHAPES above at each mix (and read = write): rows "floor2: ...";
    copies: the device copy (cuMemcpyDtoD graph nodes) and copy1 at the rows' size, so the 1 GiB
    copy of the table's head can be compared at this size; scale: output sizes in multiples of
    `shape` (the size effect)."""
    from barecuda.kernels import _args as A
    mod = _shape_module(bc)
    sms = A.sm_count(0)
    n, k = shape
    out = []
    cases = [(f.upper(), bb / (qk * 2)) for f, bb, qk in mixes] + ([("read = write", 1.0)] if rw else [])
    for sc in scale:
        wbytes = n * k * 2 * sc
        tag = f" x{sc}" if sc != 1 else ""
        if copies:
            srcs = _weights(bc, s, 2 * wbytes, lambda: bc.empty((wbytes,), "uint8", stream=s))
            y = bc.empty((wbytes,), "uint8", stream=s)

            def chain(g):
                prev = None
                for b in srcs:
                    prev = g.add_memcpy(y, b, wbytes, depends_on=prev) if prev is not None else g.add_memcpy(y, b, wbytes)
            from barecuda.bench._kernel_timing import _time_graph
            us = _time_graph(bc, s, chain, 15) * 1e3 / len(srcs)
            out.append((f"floor2: device copy (memcpy nodes), {wbytes / 1e6:.0f} MB{tag}", us, 2 * wbytes, None))
            kern = mod.get_kernel("copy1")
            nv = wbytes // 16
            plans = [kern.bind(-(-nv // 256), 256, b, y, nv, stream=s) for b in srcs]
            out.append((f"floor2: copy1 (a thread a vector), read = write{tag}", _time_plans(bc, s, plans), 2 * wbytes, None))
            del plans, srcs
        for mix, ratio in cases:
            for label, kname, flags, gmode in shapes:
                kern = mod.get_kernel(kname)
                for thr in (threads if kname == "mixw" else (128,)):
                    to = 256 if kname == "mixw" else 512
                    ti = max(1, round(to * ratio))
                    ntiles = wbytes // (16 * to)
                    rbytes = ntiles * ti * 16
                    ins = _weights(bc, s, rbytes + wbytes, lambda: bc.empty((rbytes,), "uint8", stream=s))
                    for b in ins:
                        b.memset(0x1c, stream=s)
                    y = bc.empty((wbytes,), "uint8", stream=s)
                    wpb = thr // 32 if kname == "mixw" else 1
                    if gmode == "flat":
                        grid = -(-ntiles // wpb)
                    else:
                        try:
                            occ = max(1, kern.max_active_blocks_per_sm(thr))
                        except Exception:   # noqa: BLE001 -- the driver double
                            occ = 1
                        grid = min(-(-ntiles // wpb), sms * occ)
                    plans = [kern.bind(grid, thr, b, y, ti, ntiles, flags, stream=s) for b in ins]
                    us = _time_plans(bc, s, plans)
                    tt = f" {thr} thr" if len(threads) > 1 and kname == "mixw" else ""
                    out.append((f"floor2: {label}{tt}, {mix}'s mix{tag} (grid {grid})", us, rbytes + wbytes, None))
                    del plans, ins
    return out
