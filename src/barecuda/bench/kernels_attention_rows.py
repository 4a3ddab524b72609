"""Attention rows (issue 23): decode attention GB/s on the KV bytes and % of spec bandwidth,
prefill flash attention TFLOP/s, each beside a device-copy row and torch's op in the same run.

Section ``kernels_attention`` (``--rows kernels_attention``). Decode rotates over enough
separate caches that the bytes touched per round exceed 512 MB (L2 is 50-60 MB), and the
rotation is one CUDA graph (one node per call) so the CPU's issue cost is not measured.
Torch's decode row is SDPA (GQA) on the same shapes, captured in a torch CUDA graph the same
way. Beside each decode row of the first group, its floors from the same run and the same
chain: a ``cuMemcpyDtoD`` node of the KV bytes, a read-only streaming kernel of ours with the
decode grid and with 4 blocks a multiprocessor, an empty node (``decode_floors``); the row's
label carries its time over the read floor. ``python -m barecuda.bench.kernels_attention_rows``
prints the table alone; ``--floor-probe`` / ``--floor-probe2`` (where the fixed cost goes:
probe builds, merge and pipeline variants; ``--floor-probe3``: the split finish, per-warp waits, the cluster
merge; ``--floor-probe4``: the new default, bulk copies), ``--probe``, ``--pdl-probe``, ``--merge-probe`` are
the developer probes (``--probe-only``: without the table).
"""
import math
from typing import Any, Dict, Tuple

from barecuda.bench.report import Section
from barecuda.bench._kernel_timing import (SPEC_GBS, _chain, _time_exe, _time_graph, _torch, copy_gbs, load_source,
                                          torch_graph_us)

ORDER = 62
PEAK_TF = {"H200": 989.0, "H100": 989.0}             # dense bf16/fp16 tensor TFLOP/s (SXM)
COLUMNS = [("value", 12), ("% spec", 8), ("vs torch", 9)]


def _spec(bc):
    name = bc.Device().name
    for k in SPEC_GBS:
        if k in name:
            return k, SPEC_GBS[k], PEAK_TF[k]
    return name, None, None


def _decode_bufs(bc, s, shape, nh, d, ctx, n, batch=1):
    """n bf16 (k, v) caches of `shape`, q and o (nh, d) and the int32 length ctx, on stream s;
    ``batch`` > 1: a batch of sequences (the caches, q and o with a leading batch axis, one
    length ctx a sequence)."""
    if batch > 1:
        shape = (batch,) + tuple(shape)
    caches = []
    for _ in range(n):
        k = bc.empty(shape, "bfloat16", stream=s)
        v = bc.empty(shape, "bfloat16", stream=s)
        k.memset(0x3c, stream=s)
        v.memset(0x3c, stream=s)
        caches.append((k, v))
    qs = (batch, nh, d) if batch > 1 else (nh, d)
    q = bc.empty(qs, "bfloat16", stream=s)
    q.memset(0x3c, stream=s)
    o = bc.empty(qs, "bfloat16", stream=s)
    ln = bc.empty((batch,), "int32", stream=s)
    ln.copy_from(bytearray(ctx.to_bytes(4, "little") * batch), stream=s)
    return caches, q, o, ln


def _time_captured(bc, s, plans, reps=20):
    """ms per replay of a graph made by capturing the plans' launches on stream s (a plan bound
    with programmatic serialization gives a programmatic edge to the node before it)."""
    from barecuda.graph import capture
    s.synchronize()
    with capture(s) as g:
        for p in plans:
            p()
    g.keep_alive(plans)
    return _time_exe(bc, s, g.instantiate(), reps)


def _time_chain(bc, s, plans, pdl):
    """ms per replay of the plans chained in one graph: add_plan nodes, or captured (pdl)."""
    return _time_captured(bc, s, plans) if pdl else _time_graph(bc, s, lambda g: _chain(g, plans))


# The read floors of the decode rows: a minimal read-only streaming kernel of ours (16-byte
# ld.global.nc.L1::no_allocate, READ_U loads of each of K and V in flight a thread before any
# is used, an XOR fold that is never stored for the bench's contents), block i reading the i-th
# contiguous piece of K and of V: with the decode plan's grid that is the decode kernel's split
# of a head-major cache.
READ_FLOOR_SRC = r"""
__device__ __forceinline__ uint4 rd_nc(const uint4* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
extern "C" __global__ void __launch_bounds__(256, 1) read_floor(const uint4* __restrict__ a, const uint4* __restrict__ b, long long n16,
                                      long long per, unsigned* __restrict__ sink) {
    const long long beg = (long long)blockIdx.x * per;
    const long long end = beg + per < n16 ? beg + per : n16;
    const long long step = (long long)READ_U * blockDim.x;
    unsigned x = 0;
    long long i = beg + threadIdx.x;
    for (; i + step - blockDim.x < end; i += step) {   // every load of the turn in range: all issued first
        uint4 va[READ_U], vb[READ_U];
#pragma unroll
        for (int u = 0; u < READ_U; ++u) {
            va[u] = rd_nc(a + i + (long long)u * blockDim.x);
            vb[u] = rd_nc(b + i + (long long)u * blockDim.x);
        }
#pragma unroll
        for (int u = 0; u < READ_U; ++u) x ^= va[u].x ^ va[u].y ^ va[u].z ^ va[u].w ^ vb[u].x ^ vb[u].y ^ vb[u].z ^ vb[u].w;
    }
    for (; i < end; i += blockDim.x) {
        const uint4 p = rd_nc(a + i), q = rd_nc(b + i);
        x ^= p.x ^ p.y ^ p.z ^ p.w ^ q.x ^ q.y ^ q.z ^ q.w;
    }
    if (x == 0x9e3779b9u) sink[0] = x;
}
"""
_read_kernels: Dict[int, Any] = {}


def _read_kernel(bc, u):
    k = _read_kernels.get(u)
    if k is None:
        mod = load_source(bc, READ_FLOOR_SRC, "read_floor.cu", [f"-DREAD_U={u}"])
        k = _read_kernels[u] = mod.get_kernel("read_floor")
    return k


def decode_floors(bc, s, caches, kv_bytes, grid_blocks, reps=20, smem=0):
    """us a call of the floors beside a decode row, chained as its nodes are (one graph node a
    cache, > 512 MB a round): ``copy`` a cuMemcpyDtoD node of kv_bytes (reads the same number
    of bytes, and writes as many: separate rotating source and destination buffers); ``read``
    the read kernel with the decode plan's grid (``grid_blocks`` blocks of 128 threads, 16
    loads of K and of V in flight a thread); ``read_wave`` the read kernel over 4 blocks of 256
    threads a multiprocessor (4 + 4 loads in flight a thread); ``empty`` the read kernel over
    0 bytes with the decode grid (the chain's per-node launch floor); with ``smem`` also
    ``empty_smem``: that with the decode kernel's dynamic shared memory a block."""
    n = len(caches)
    n16 = kv_bytes // 2 // 16
    sink = bc.zeros((4,), "uint32", stream=s)
    sms = bc.Device().attribute("multiprocessor_count")
    out = {}
    cases = [("read", 16, grid_blocks, 128, n16, 0), ("read_wave", 4, 4 * sms, 256, n16, 0),
             ("empty", 16, grid_blocks, 128, 0, 0)]
    if smem:
        cases.append(("empty_smem", 16, grid_blocks, 128, 0, smem))
    for key, u, blocks, threads, nbytes, sm in cases:
        kern = _read_kernel(bc, u)
        if sm > 48 * 1024 and kern.max_dynamic_shared_memory < sm:
            kern.set_max_dynamic_shared_memory(sm)
        per = max(1, -(-n16 // blocks))
        plans = [kern.bind(blocks, threads, k, v, nbytes, per, sink, stream=s, shared_mem=sm) for k, v in caches]
        out[key] = _time_graph(bc, s, lambda g, p=plans: _chain(g, p), reps) * 1e3 / n
    src = [bc.empty((kv_bytes,), "uint8", stream=s) for _ in range(n)]
    dst = [bc.empty((kv_bytes,), "uint8", stream=s) for _ in range(n)]
    for b in src:
        b.memset(0x3c, stream=s)

    def copies(g):
        prev = None
        for a, b in zip(src, dst):
            prev = g.add_memcpy(b, a, kv_bytes, depends_on=prev) if prev is not None else g.add_memcpy(b, a, kv_bytes)
    out["copy"] = _time_graph(bc, s, copies, reps) * 1e3 / n
    del src, dst
    return out


def decode_rows(bc, s, torch=None, shapes=((32, 8, 128, 4096), (32, 8, 128, 16384), (32, 8, 128, 32768),
                                           (32, 8, 64, 8192)), layout="head_major", pdl=False, floors=False, batch=1):
    """One row a shape: the chained graph's us a call and GB/s on the KV bytes; ``pdl``: the
    plans made with ``pdl=True`` and the graph captured (programmatic edges between the nodes).
    ``floors``: each row gets a 5th item, :func:`decode_floors` of the same caches (head-major).
    ``batch`` > 1: each call a batch of that many sequences of length ctx (one launch; the KV
    bytes are the batch's)."""
    from barecuda.kernels import _attention as A
    out = []
    for nh, nkv, d, ctx in shapes:
        kv_bytes = 2 * ctx * nkv * d * 2 * batch
        n = max(2, math.ceil((512 << 20) / kv_bytes))
        shape = (nkv, ctx, d) if layout == "head_major" else (ctx, nkv, d)
        caches, q, o, ln = _decode_bufs(bc, s, shape, nh, d, ctx, n, batch)
        plans = [A.plan_attention_decode(q, k, v, ln, out=o, kv_layout=layout, pdl=pdl, stream=s) for k, v in caches]
        ms = _time_chain(bc, s, plans, pdl) / n
        gbs = kv_bytes / (ms * 1e-3) / 1e9
        tgbs = None
        if torch is not None:
            try:
                tgbs = _torch_decode(torch, nh, nkv, d, ctx, n, kv_bytes, batch)
            except Exception as exc:   # noqa: BLE001 -- a bench row, not a test
                tgbs = f"n/a ({type(exc).__name__})"
        tag = "hm" if layout == "head_major" else "tm"
        row = (f"decode bf16 {tag} h{nh}/{nkv} d{d} ctx {ctx}{' pdl' if pdl else ''}"
               + (f" x{batch} seqs" if batch > 1 else ""), ms * 1e3, gbs, tgbs)
        if floors:
            g = plans[0].grid
            row += (decode_floors(bc, s, caches, kv_bytes, g[0] * g[1] * g[2]),)
        out.append(row)
        del plans, caches
    return out


def decode_probe(shapes=((32, 8, 128, 4096), (32, 8, 128, 32768)), short=((32, 8, 64, 129), (32, 8, 128, 129), (32, 8, 128, 1024)),
                 splits=(None, 8, 32, 64)):
    """Developer probe (``--probe``), one line each:
    - long contexts: the chained row (a graph of one node per cache, as decode_rows) beside
      ONE launch after an L2 flush (events around it, median of 15): the chain's per-call
      cost minus the isolated kernel is the graph/launch share; for several n_splits;
    - short contexts (the decode loop's attention node, <= 129 tokens, L2-resident): a
      graph of 16 nodes back to back on one cache, us a node, for n_splits default and
      1, 2, 4, 8 (the lead's question: is one split a head near 2.5 us?)."""
    import barecuda as bc
    from barecuda.kernels import _attention as A
    s = bc.Stream()
    flush = bc.empty((256 << 20,), "uint8", stream=s)
    e0, e1 = bc.Event(timing=True), bc.Event(timing=True)

    def mk(nh, nkv, d, ctx, n):
        return _decode_bufs(bc, s, (nkv, ctx, d), nh, d, ctx, n)

    for nh, nkv, d, ctx in shapes:
        kv_bytes = 2 * ctx * nkv * d * 2
        n = max(2, math.ceil((512 << 20) / kv_bytes))
        caches, q, o, ln = mk(nh, nkv, d, ctx, n)
        for ns in splits:
            try:
                plans = [A.plan_attention_decode(q, k, v, ln, out=o, kv_layout="head_major", n_splits=ns, stream=s)
                         for k, v in caches]
            except Exception as exc:   # noqa: BLE001 -- a probe
                print(f"  probe decode ctx {ctx} d{d} splits {ns}: {type(exc).__name__}: {exc}")
                continue
            chain = _time_graph(bc, s, lambda g, p=plans: _chain(g, p)) * 1e3 / n
            ts = []
            for i in range(15):
                flush.memset(i & 0xff, stream=s)
                e0.record(s)
                plans[i % n].launch()
                e1.record(s)
                e1.synchronize()
                ts.append(e1.elapsed_ms(e0) * 1e3)
            one = sorted(ts)[len(ts) // 2]
            g1 = _time_graph(bc, s, lambda g, p=plans: _chain(g, p[:1])) * 1e3
            print(f"  probe decode bf16 h{nh}/{nkv} d{d} ctx {ctx} splits {ns or 'default'} (grid {plans[0].grid[0]}): "
                  f"chain {chain:.2f} us ({kv_bytes / chain / 1e3:.0f} GB/s), one launch cold L2 {one:.2f} us "
                  f"({kv_bytes / one / 1e3:.0f} GB/s), one-node graph (L2 warm) {g1:.2f} us", flush=True)
            del plans
        del caches
    old = A.DEC_MINCHUNK
    for nh, nkv, d, ctx in short:
        caches, q, o, ln = mk(nh, nkv, d, 4096, 1)          # the model's cache: 4096 slots, ctx used
        ln.copy_from(bytearray((ctx - 1).to_bytes(4, "little")), stream=s)
        k, v = caches[0]
        old1 = A.DEC_ONESPLIT
        for mc, one in ((64, 0), (128, 0), (256, 0), (512, 0), (128, 256)):
            A.DEC_MINCHUNK, A.DEC_ONESPLIT = mc, one
            try:
                for ns in (None, 1, 4):
                    plan = A.plan_attention_decode(q, k, v, ln, out=o, len_offset=1, kv_layout="head_major",
                                                   n_splits=ns, stream=s)
                    us = _time_graph(bc, s, lambda g, p=plan: _chain(g, [p] * 16)) * 1e3 / 16
                    print(f"  probe short decode bf16 h{nh}/{nkv} d{d} ctx {ctx} DEC_MINCHUNK={mc} DEC_ONESPLIT={one} splits "
                          f"{ns or 'default'} (grid {plan.grid}): {us:.2f} us a node (graph of 16)", flush=True)
            finally:
                A.DEC_MINCHUNK, A.DEC_ONESPLIT = old, old1
        del caches
    del flush


PDL_VARIANTS: Tuple[Tuple[str, bool, Dict[str, Any]], ...] = (   # (label, pdl plans, _attention settings); the H200 run of 2026-11-27 02:29 UTC is in docs/kernels.md
    ("plain (no griddepcontrol)", False, {}), ("griddepcontrol build, plain launch", False, {"DEC_PDL_PLAIN": 1}),
    ("pdl, no prefetch", True, {}), ("pdl, prefetch 256", True, {"PDL_PF_KEYS": 256}),
    ("pdl, prefetch 1024", True, {"PDL_PF_KEYS": 1024}), ("pdl 3 stages, no prefetch", True, {"PDL_STAGES": 3}),
    ("pdl 3 stages, prefetch 256", True, {"PDL_STAGES": 3, "PDL_PF_KEYS": 256}),
    ("pdl 3 stages, prefetch 1024", True, {"PDL_STAGES": 3, "PDL_PF_KEYS": 1024}),
    ("pdl 3 stages, prefetch 256, 2 blocks/SM of splits", True, {"PDL_STAGES": 3, "PDL_PF_KEYS": 256, "PDL_OCC": 2}),
    ("plain again", False, {}), ("griddepcontrol build, plain launch again", False, {"DEC_PDL_PLAIN": 1}))
MERGE_VARIANTS: Tuple[Tuple[str, bool, Dict[str, Any]], ...] = (   # the split merge: DEC_MERGE 2 (float4, 16 splits a round; default) or 0 (8 splits a round)
    ("plain, merge 2", False, {}), ("plain, merge 0", False, {"DEC_MERGE": 0}),
    ("pdl, merge 2", True, {}), ("plain, merge 2 again", False, {}),
    ("plain, merge 0 again", False, {"DEC_MERGE": 0}))


def _with_settings(A, label, settings, call):
    """call() with the attention module's tuning values set to `settings` (restored after it,
    the multiprocessor-count memo cleared both times); None, the error printed, when it raises:
    a probe reports a variant that fails and goes on."""
    old = {k: getattr(A, k) for k in settings}
    for k, v in settings.items():
        setattr(A, k, v)
    A._sms.clear()
    try:
        return call()
    except Exception as exc:   # noqa: BLE001 -- a probe
        print(f"  {label}: {type(exc).__name__}: {exc}", flush=True)
        return None
    finally:
        for k, v in old.items():
            setattr(A, k, v)
        A._sms.clear()


def decode_pdl_probe(shapes=((32, 8, 128, 4096), (32, 8, 128, 16384), (32, 8, 128, 32768), (32, 8, 64, 8192)),
                     short=((32, 8, 128, 129), (32, 8, 64, 129), (32, 8, 128, 1024)), variants=PDL_VARIANTS):
    """Developer probe (``--pdl-probe``; ``--merge-probe`` for MERGE_VARIANTS): the chained decode
    rows (head-major, one node a cache, > 512 MB a round) and the decode loop's short node (a graph
    of 16 nodes on one 4096-slot cache) for each variant: the plain plan (DEC_PDL=0 build), the
    griddepcontrol build launched plainly, PDL plans (captured graph) with or without the pre-wait
    L2 prefetch, 4 or 3 stages (3: two grids' blocks share a multiprocessor), the split merge.
    One line each: us a call, GB/s, % of spec."""
    import barecuda as bc
    from barecuda.kernels import _attention as A
    s = bc.Stream()
    _, spec = _spec(bc)[:2]
    print(f"  pdl-probe on {bc.Device().name}", flush=True)

    def run(label, pdl, settings, fn):
        return _with_settings(A, label, settings, lambda: fn(pdl))

    for nh, nkv, d, ctx in shapes:
        kv_bytes = 2 * ctx * nkv * d * 2
        n = max(2, math.ceil((512 << 20) / kv_bytes))
        caches, q, o, ln = _decode_bufs(bc, s, (nkv, ctx, d), nh, d, ctx, n)
        for label, pdl, settings in variants:
            def fn(pdl, caches=caches, q=q, o=o, ln=ln):
                plans = [A.plan_attention_decode(q, k, v, ln, out=o, kv_layout="head_major", pdl=pdl, stream=s)
                         for k, v in caches]
                return _time_chain(bc, s, plans, pdl) * 1e3 / n, plans[0].grid
            r = run(label, pdl, settings, fn)
            if r:
                us, grid = r
                gbs = kv_bytes / us / 1e3
                pc = f"{100 * gbs / spec:.1f}%" if spec else ""
                print(f"  pdl-probe decode bf16 h{nh}/{nkv} d{d} ctx {ctx} [{label}] grid {grid}: {us:.2f} us "
                      f"{gbs:.0f} GB/s {pc}", flush=True)
        del caches
    for nh, nkv, d, ctx in short:
        caches, q, o, ln = _decode_bufs(bc, s, (nkv, 4096, d), nh, d, 4096, 1)
        ln.copy_from(bytearray((ctx - 1).to_bytes(4, "little")), stream=s)
        k, v = caches[0]
        for label, pdl, settings in variants:
            def fn_short(pdl, k=k, v=v, q=q, o=o, ln=ln):
                p = A.plan_attention_decode(q, k, v, ln, out=o, len_offset=1, kv_layout="head_major", pdl=pdl,
                                            stream=s)
                return _time_chain(bc, s, [p] * 16, pdl) * 1e3 / 16
            us = run(label, pdl, settings, fn_short)
            if us:
                print(f"  pdl-probe short decode bf16 h{nh}/{nkv} d{d} ctx {ctx} [{label}]: {us:.2f} us a node "
                      "(graph of 16)", flush=True)
        del caches


FLOOR_VARIANTS: Tuple[Tuple[str, Dict[str, Any]], ...] = (   # --floor-probe: where the fixed cost goes, and the fixes
    ("default", {}), ("probe 1: no merge", {"DEC_PROBE": 1}),
    ("probe 2: no merge, no softmax math", {"DEC_PROBE": 2}),
    ("probe 3: probe 2 without the Q and length loads", {"DEC_PROBE": 3}),
    ("probe 4: the length taken as max_ctx", {"DEC_PROBE": 4}),
    ("merge 2 (float4, 16 splits a round)", {"DEC_MERGE": 2}), ("sync 1 (thread 0 fences)", {"DEC_SYNC": 1}),
    ("merge 2 + sync 1", {"DEC_MERGE": 2, "DEC_SYNC": 1}),
    ("8 warps, 3 stages", {"DEC_WARPS": 8, "DEC_STAGES": 3}),
    ("1 split", {"n_splits": 1}), ("8 splits", {"n_splits": 8}), ("16 splits", {"n_splits": 16}),
    ("24 splits", {"n_splits": 24}), ("16 splits, merge 2 + sync 1", {"n_splits": 16, "DEC_MERGE": 2, "DEC_SYNC": 1}),
    ("default again", {}),
    ("merge 2 + sync 1 again", {"DEC_MERGE": 2, "DEC_SYNC": 1}))
FLOOR_D64 = ("default", "probe 1: no merge", "probe 2: no merge, no softmax math", "merge 2 (float4, 16 splits a round)",
             "merge 2 + sync 1", "16 splits", "24 splits",
             "16 splits, merge 2 + sync 1", "default again", "merge 2 + sync 1 again")
FLOOR_SPLITS_D128 = ("1 split", "8 splits")   # the split-count variants of the d128 4k row (d64: FLOOR_D64's)
FLOOR_SHORT = ("default", "merge 2 (float4, 16 splits a round)", "sync 1 (thread 0 fences)", "merge 2 + sync 1",
               "default again")


# --floor-probe2: with the merge fixed (DEC_MERGE=2, DEC_SYNC=1 the defaults), the pipeline shape and the split cap
FLOOR2_VARIANTS: Tuple[Tuple[str, Dict[str, Any]], ...] = (
    ("default (merge 2, sync 1)", {}), ("old default (merge 0, sync 0)", {"DEC_MERGE": 0, "DEC_SYNC": 0}),
    ("probe 1: no merge", {"DEC_PROBE": 1}),
    ("8 warps, 3 stages", {"DEC_WARPS": 8, "DEC_STAGES": 3}), ("8 warps, 2 stages", {"DEC_WARPS": 8, "DEC_STAGES": 2}),
    ("4 warps, 3 stages", {"DEC_STAGES": 3}), ("4 warps, 32 keys a warp, 3 stages", {"DEC_KPW": 32, "DEC_STAGES": 3}),
    ("splits: 1 block a multiprocessor", {"SPLIT_OCC": 1}),
    ("8 warps, 3 stages, 1 block a multiprocessor", {"DEC_WARPS": 8, "DEC_STAGES": 3, "SPLIT_OCC": 1}),
    ("8 warps, 3 stages, probe 1", {"DEC_WARPS": 8, "DEC_STAGES": 3, "DEC_PROBE": 1}),
    ("cluster merge (DEC_CLUSTER)", {"DEC_CLUSTER": 1}),
    ("default again", {}), ("8 warps, 3 stages again", {"DEC_WARPS": 8, "DEC_STAGES": 3}),
    ("old default again", {"DEC_MERGE": 0, "DEC_SYNC": 0}))
FLOOR2_NAMES = tuple(label for label, _ in FLOOR2_VARIANTS)
# --floor-probe3 (H200 2026-11-27 09:51, docs/kernels.md): on the 8-warp 3-stage block ring of the time (DEC_WPIPE=0,
# DEC_SYNC=1, set explicitly below), the split finish without fence.sc (DEC_SYNC=2), per-warp copies and waits in the
# block's stages (DEC_WPIPE=2, 3), the cluster merge's first GPU run (DEC_CLUSTER)
FLOOR3_VARIANTS: Tuple[Tuple[str, Dict[str, Any]], ...] = tuple((label, {"DEC_WPIPE": 0, "DEC_SYNC": 1, **st}) for label, st in (
    ("default", {}), ("probe 1: no merge", {"DEC_PROBE": 1}), ("sync 2 (one atom.acq_rel)", {"DEC_SYNC": 2}),
    ("wpipe 2 (per-warp copies and waits)", {"DEC_WPIPE": 2}),
    ("wpipe 2 + sync 2", {"DEC_WPIPE": 2, "DEC_SYNC": 2}), ("wpipe 1 (per-warp contiguous rings)", {"DEC_WPIPE": 1}),
    ("wpipe 3 (2 + refill after reading)", {"DEC_WPIPE": 3}), ("wpipe 3 + sync 2", {"DEC_WPIPE": 3, "DEC_SYNC": 2}),
    ("cluster merge", {"DEC_CLUSTER": 1}), ("cluster merge + wpipe 3", {"DEC_CLUSTER": 1, "DEC_WPIPE": 3}),
    ("wpipe 3 + probe 1", {"DEC_WPIPE": 3, "DEC_PROBE": 1}),
    ("default again", {}), ("sync 2 again", {"DEC_SYNC": 2}), ("wpipe 3 + sync 2 again", {"DEC_WPIPE": 3, "DEC_SYNC": 2}),
    ("wpipe 2 + sync 2 again", {"DEC_WPIPE": 2, "DEC_SYNC": 2}), ("cluster merge again", {"DEC_CLUSTER": 1})))
FLOOR3_NAMES = tuple(label for label, _ in FLOOR3_VARIANTS)
# --floor-probe4 (H200 2026-11-27 10:08, docs/kernels.md): the new default (DEC_WPIPE=3, DEC_SYNC=2) against the old one, bulk copies (DEC_TMA)
FLOOR4_VARIANTS: Tuple[Tuple[str, Dict[str, Any]], ...] = (
    ("default (wpipe 3, sync 2)", {}), ("old default (wpipe 0, sync 1)", {"DEC_WPIPE": 0, "DEC_SYNC": 1}),
    ("bulk copies (tma)", {"DEC_TMA": 1}), ("tma + probe 1 (no merge)", {"DEC_TMA": 1, "DEC_PROBE": 1}),
    ("probe 1: no merge", {"DEC_PROBE": 1}), ("probe 2: no merge, no softmax math", {"DEC_PROBE": 2}),
    ("tma + probe 2", {"DEC_TMA": 1, "DEC_PROBE": 2}), ("wpipe 2", {"DEC_WPIPE": 2}),
    ("default again", {}), ("tma again", {"DEC_TMA": 1}), ("old default again", {"DEC_WPIPE": 0, "DEC_SYNC": 1}))
FLOOR4_NAMES = tuple(label for label, _ in FLOOR4_VARIANTS)


def floor_probe_defines(variants=None, d64_names=FLOOR_D64):
    """(head dim, _dec_defines) of every module --floor-probe loads (for a parallel warm-up)."""
    from barecuda.kernels import _attention as A
    out = []
    for d, names in ((128, None), (64, d64_names)):
        for label, st in variants or FLOOR_VARIANTS:
            if names is not None and label not in names:
                continue
            old = {k: getattr(A, k) for k in st if k not in ("n_splits", "SPLIT_OCC")}
            for k in old:
                setattr(A, k, st[k])
            try:
                defs = A._dec_defines(d)
            finally:
                for k, v in old.items():
                    setattr(A, k, v)
            if defs not in out:
                out.append(defs)
    return out


def decode_floor_probe(shapes=((32, 8, 128, 4096), (32, 8, 128, 16384), (32, 8, 128, 32768), (32, 8, 64, 8192)),
                       short=((32, 8, 128, 129), (32, 8, 64, 129), (32, 8, 128, 1024)), variants=FLOOR_VARIANTS,
                       d64_names=FLOOR_D64, short_names=FLOOR_SHORT):
    """Developer probe (``--floor-probe``): for each long context, the read floors of
    :func:`decode_floors` (first and last), then each variant's chained decode row (head-major,
    one node a cache, > 512 MB a round): the probe builds (``DEC_PROBE`` 1-4: no merge; no
    merge and no softmax math; that without the Q/length loads; the length taken as max_ctx),
    the split-finish fixes (``DEC_MERGE=2``, ``DEC_SYNC=1``), 1 and 8 splits; then
    the decode loop's short node (a graph of 16 nodes on one 4096-slot cache) for the fixes.
    One line each: us a call, GB/s, % of spec, x the read floor."""
    import barecuda as bc
    from barecuda.kernels import _attention as A
    s = bc.Stream()
    _, spec = _spec(bc)[:2]
    print(f"  floor-probe on {bc.Device().name}", flush=True)

    def run(label, settings, fn):
        st = {k: v for k, v in settings.items() if k != "n_splits"}
        return _with_settings(A, label, st, lambda: fn(settings.get("n_splits")))

    for nh, nkv, d, ctx in shapes:
        kv_bytes = 2 * ctx * nkv * d * 2
        n = max(2, math.ceil((512 << 20) / kv_bytes))
        caches, q, o, ln = _decode_bufs(bc, s, (nkv, ctx, d), nh, d, ctx, n)
        p0 = A.plan_attention_decode(q, caches[0][0], caches[0][1], ln, out=o, kv_layout="head_major", stream=s)
        g = p0.grid
        fl = decode_floors(bc, s, caches, kv_bytes, g[0] * g[1], smem=p0.shared_mem)
        line = ", ".join(f"{k} {v:.2f} us" + (f" ({kv_bytes / v / 1e3:.0f} GB/s, {100 * kv_bytes / v / 1e3 / spec:.1f}%)"
                                               if k != "empty" and spec else "") for k, v in fl.items())
        print(f"  floor-probe floors h{nh}/{nkv} d{d} ctx {ctx} ({kv_bytes / 1e6:.1f} MB, grid {g}): {line}", flush=True)
        for label, settings in variants:
            if d == 64 and label not in d64_names:
                continue
            if "n_splits" in settings and not (d == 64 or (ctx == 4096 and label in FLOOR_SPLITS_D128)):
                continue

            def fn(ns, caches=caches, q=q, o=o, ln=ln):
                plans = [A.plan_attention_decode(q, k, v, ln, out=o, kv_layout="head_major", n_splits=ns, stream=s)
                         for k, v in caches]
                return _time_chain(bc, s, plans, False) * 1e3 / n, plans[0].grid
            r = run(label, settings, fn)
            if r:
                us, grid = r
                gbs = kv_bytes / us / 1e3
                pc = f"{100 * gbs / spec:.1f}%" if spec else ""
                print(f"  floor-probe decode bf16 h{nh}/{nkv} d{d} ctx {ctx} [{label}] grid {grid}: {us:.2f} us "
                      f"{gbs:.0f} GB/s {pc} x{us / fl['read']:.2f} read floor", flush=True)
        fl2 = decode_floors(bc, s, caches, kv_bytes, g[0] * g[1], smem=p0.shared_mem)
        print(f"  floor-probe floors again ctx {ctx} d{d}: " + ", ".join(f"{k} {v:.2f} us" for k, v in fl2.items()),
              flush=True)
        del caches
    for nh, nkv, d, ctx in short:
        caches, q, o, ln = _decode_bufs(bc, s, (nkv, 4096, d), nh, d, 4096, 1)
        ln.copy_from(bytearray((ctx - 1).to_bytes(4, "little")), stream=s)
        k, v = caches[0]
        for label, settings in variants:
            if label not in short_names:
                continue

            def fn_short(ns, k=k, v=v, q=q, o=o, ln=ln):
                p = A.plan_attention_decode(q, k, v, ln, out=o, len_offset=1, kv_layout="head_major", n_splits=ns,
                                            stream=s)
                return _time_chain(bc, s, [p] * 16, False) * 1e3 / 16
            us = run(label, settings, fn_short)
            if us:
                print(f"  floor-probe short decode bf16 h{nh}/{nkv} d{d} ctx {ctx} [{label}]: {us:.2f} us a node "
                      "(graph of 16)", flush=True)
        del caches


def _torch_decode(torch, nh, nkv, d, ctx, n, kv_bytes, batch=1):
    F = torch.nn.functional
    ks = [torch.ones(batch, nkv, ctx, d, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    vs = [torch.ones(batch, nkv, ctx, d, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    q = torch.ones(batch, nh, 1, d, device="cuda", dtype=torch.bfloat16)

    def body():
        for k, v in zip(ks, vs):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    ms = torch_graph_us(torch, body, n, reps=10) / 1e3
    return kv_bytes / (ms * 1e-3) / 1e9


def prefill_rows(bc, s, torch=None, shapes=((4, 32, 32, 128, 4096, True), (1, 32, 8, 128, 4096, True),
                                            (4, 32, 32, 64, 4096, True), (4, 32, 32, 128, 4096, False))):
    from barecuda.kernels import _attention as A
    out = []
    for b, nh, nkv, d, sq, causal in shapes:
        q = bc.empty((b, sq, nh, d), "bfloat16", stream=s)
        k = bc.empty((b, sq, nkv, d), "bfloat16", stream=s)
        v = bc.empty((b, sq, nkv, d), "bfloat16", stream=s)
        for x in (q, k, v):
            x.memset(0x3c, stream=s)
        o = bc.empty((b, sq, nh, d), "bfloat16", stream=s)
        p = A.plan_attention_prefill(q, k, v, causal=causal, out=o, stream=s)
        ms = _time_graph(bc, s, lambda g: _chain(g, [p] * 5), reps=5) / 5
        flop = 4.0 * b * nh * sq * sq * d * (0.5 if causal else 1.0)
        tf = flop / (ms * 1e-3) / 1e12
        ttf = None
        if torch is not None:
            try:
                ttf = _torch_prefill(torch, b, nh, nkv, d, sq, causal, flop)
            except Exception as exc:   # noqa: BLE001
                ttf = f"n/a ({type(exc).__name__}: {exc})"[:60]
        out.append((f"prefill bf16 b{b} h{nh}/{nkv} d{d} s{sq} {'causal' if causal else 'full'}", ms * 1e3, tf, ttf))
    return out


def _torch_prefill(torch, b, nh, nkv, d, sq, causal, flop):
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(b, nh, sq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, nkv, sq, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, nkv, sq, d, device="cuda", dtype=torch.bfloat16)
    if nkv != nh:   # the flash backend takes no GQA: give it the repeated heads (not timed)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(5):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) / 5)
    ts.sort()
    return flop / (ts[len(ts) // 2] * 1e-3) / 1e12


def issue_rows(bc, s, n=500):
    """CPU issue cost (us per call) of the decode op, its plan and the raw Kernel.launch of the same kernel."""
    import time
    from barecuda.kernels import _attention as A
    q = bc.empty((32, 128), "bfloat16", stream=s)
    k = bc.empty((8, 4096, 128), "bfloat16", stream=s)
    o = bc.empty((32, 128), "bfloat16", stream=s)
    ln = bc.zeros((1,), "int32", stream=s)
    ws = bc.zeros((A.decode_workspace_size(32, 8, 128, 16),), "uint8", stream=s)
    kw = dict(out=o, kv_layout="head_major", n_splits=16, workspace=ws, stream=s)
    plan = A.plan_attention_decode(q, k, k, ln, **kw)
    kern, grid, block, smem, args, _, _ = A._prep_decode(q, k, k, ln, o, None, 0, None, 16, ws, s, "head_major")
    rows = []
    for label, f in (("issue: attention_decode() op", lambda: A.attention_decode(q, k, k, ln, **kw)),
                     ("issue: its plan()", plan),
                     ("issue: raw Kernel.launch, same kernel", lambda: kern.launch(grid, block, *args, stream=s,
                                                                                 shared_mem=smem))):
        for _ in range(50):
            f()
        s.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            f()
        rows.append((label, (time.perf_counter() - t) / n * 1e6))
        s.synchronize()
    return rows


def add_decode_rows(sec, drows, spec):
    """The decode rows into the section: us, GB/s on the KV bytes, % of spec, torch; a row
    with floors (``decode_rows(floors=True)``) is labelled with its time over the read floor's
    and followed by the floor rows of the same run."""
    for label, us, gbs, tg, *fl in drows:
        tcell = f"{tg:.0f} GB/s" if isinstance(tg, float) else (tg or "")
        x = f"{gbs / tg:.2f}" if isinstance(tg, float) else ""
        if fl:   # attention / read floor beside % of spec
            label += f" ({us / fl[0]['read']:.2f}x read floor)"
        sec.add(label, [f"{us:.1f}", f"{gbs:.0f} GB/s", f"{100 * gbs / spec:.0f}%" if spec else "", tcell, x])
        if fl:
            kvb = gbs * us * 1e3
            for key, what in (("copy", "floor: cuMemcpyDtoD node of the KV bytes (r+w)"),
                              ("read", "floor: read kernel, the decode grid"),
                              ("read_wave", "floor: read kernel, 4 blocks a multiprocessor"),
                              ("empty", "floor: empty kernel node, the decode grid")):
                fu = fl[0][key]
                fg = kvb / fu / 1e3 if key != "empty" else None
                sec.add("  " + what, [f"{fu:.1f}", f"{fg:.0f} GB/s" if fg else "",
                                      f"{100 * fg / spec:.0f}%" if fg and spec else "", "", ""])


def attention_section(ctx=None):
    import barecuda as bc
    torch = _torch()
    s = bc.Stream()
    card, spec, peak = _spec(bc)
    sec = Section("kernels_attention", f"attention kernels ({card})", [("us", 9), ("result", 12), ("% spec", 8),
                                                                       ("torch", 12), ("x torch", 8)])
    cp = copy_gbs(bc, s)
    sec.add("device copy 1 GiB (read+write)", ["", f"{cp:.0f} GB/s", f"{100 * cp / spec:.0f}%" if spec else "", "", ""])
    drows = (decode_rows(bc, s, torch, floors=True) + decode_rows(bc, s, None, pdl=True)
             + decode_rows(bc, s, None, shapes=((32, 8, 128, 32768),), layout="token_major")
             + decode_rows(bc, s, torch, shapes=((32, 8, 128, 4096), (32, 8, 64, 8192)), floors=True, batch=4)
             + decode_rows(bc, s, torch, shapes=((32, 8, 128, 4096),), floors=True, batch=8))
    add_decode_rows(sec, drows, spec)
    for label, us, tf, tt in prefill_rows(bc, s, torch):
        tcell = f"{tt:.0f} TF/s" if isinstance(tt, float) else (tt or "")
        x = f"{tf / tt:.2f}" if isinstance(tt, float) else ""
        sec.add(label, [f"{us:.0f}", f"{tf:.0f} TF/s", f"{100 * tf / peak:.0f}%pk" if peak else "", tcell, x])
    for label, us in issue_rows(bc, s):
        sec.add(label, [f"{us:.2f}", "", "", "", ""])
    import os
    tune = os.environ.get("BARECUDA_BENCH_TUNE", "")
    if tune:   # developer probe: other tile choices, same run ("1": all; else "prefill" and/or "decode")
        from barecuda.kernels import _attention as A
        names = ("PF_WARPS", "PF_QREG", "PF_MINB")
        old = tuple(getattr(A, n) for n in names)
        for cfg in ((4, 1, 3), (4, 1, 2), (4, 0, 2)) if tune == "1" or "prefill" in tune else ():
            for n, v in zip(names, cfg):
                setattr(A, n, v)
            try:
                for label, us, tf, tt in prefill_rows(bc, s, None, shapes=((4, 32, 32, 128, 4096, True),
                                                                           (4, 32, 32, 128, 4096, False))):
                    sec.add(label + " [w{} qreg{} minb{}]".format(*cfg), [f"{us:.0f}", f"{tf:.0f} TF/s", "", "", ""])
            finally:
                for n, v in zip(names, old):
                    setattr(A, n, v)
        dn = ("DEC_WARPS", "DEC_STAGES", "DEC_L2PF", "SPLIT_WAVES", "DEC_KPW", "DEC_WPIPE")
        old = tuple(getattr(A, n) for n in dn)
        decode = tune == "1" or "decode" in tune
        # "decode-short": the pipeline depths that put a 4k split's tiles in flight at once
        # (16 splits of 4 tiles at 4k: 5 stages issue all 4 in the prologue) and 2 blocks/SM
        short = ((4, 5, 0, 1, 16, 0), (4, 6, 0, 1, 16, 0), (4, 3, 0, 1, 16, 0), (4, 3, 0, 2, 16, 0))
        full = ((4, 4, 0, 2, 16, 0), (4, 3, 0, 1, 16, 0), (4, 2, 0, 1, 16, 0), (8, 3, 0, 1, 16, 0),
                (4, 2, 0, 1, 32, 0), (4, 4, 0, 1, 16, 1), (4, 3, 0, 1, 16, 1), (4, 3, 0, 1, 32, 1),
                (4, 2, 0, 1, 32, 1), (8, 3, 0, 1, 16, 1), (8, 2, 0, 1, 16, 1), (4, 4, 1, 1, 16, 1)) + short[:2]
        for cfg in (short if "decode-short" in tune else full) if decode else ():
            for n, v in zip(dn, cfg):
                setattr(A, n, v)
            try:
                for label, us, gbs, _ in decode_rows(bc, s, None, shapes=((32, 8, 128, 4096), (32, 8, 128, 32768))):
                    sec.add(label + " [{}w {}st pf{} x{} kpw{} wp{}]".format(*cfg),
                            [f"{us:.1f}", f"{gbs:.0f} GB/s", f"{100 * gbs / spec:.0f}%" if spec else "", "", ""])
            finally:
                for n, v in zip(dn, old):
                    setattr(A, n, v)
    return sec


SECTIONS = {"kernels_attention": attention_section}

if __name__ == "__main__":
    import sys
    if "--probe" in sys.argv:
        decode_probe()
    if "--pdl-probe" in sys.argv:
        decode_pdl_probe()
    if "--floor-probe" in sys.argv:
        decode_floor_probe()
    if "--floor-probe2" in sys.argv:
        decode_floor_probe(variants=FLOOR2_VARIANTS, d64_names=FLOOR2_NAMES, short_names=FLOOR2_NAMES)
    if "--floor-probe3" in sys.argv:
        decode_floor_probe(variants=FLOOR3_VARIANTS, d64_names=FLOOR3_NAMES, short_names=FLOOR3_NAMES)
    if "--floor-probe4" in sys.argv:
        decode_floor_probe(variants=FLOOR4_VARIANTS, d64_names=FLOOR4_NAMES, short_names=FLOOR4_NAMES)
    if "--merge-probe" in sys.argv:
        decode_pdl_probe(variants=MERGE_VARIANTS)
    if "--probe-only" not in sys.argv:
        print(attention_section().format())
