"""Attention ops (csrc/attention_decode.cu, attention_prefill.cu): decode over a KV cache (split-KV, device-held length,
paged), prefill flash attention, KV append.

CPU: the sources compile with real NVRTC for sm_80/sm_90 with no warnings; argument checks
raise before any launch on the driver double; a launch's grid/shared memory/parameters.
GPU (--gpu): float64 numpy references on fresh random data (odd lengths, every head dim,
GQA groups), torch SDPA where torch is installed, graph capture with the length changed
between replays.
"""
import math
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _attention as A
from barecuda.kernels import _registry

from _attention_helpers import ref_attention
from _matmul_helpers import fake, from_dev, to_dev  # noqa: F401 (fake: a fixture)

gpu = pytest.mark.gpu


# ------------------------------------------------------------------ CPU: compile
@pytest.mark.kernel_sources
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("d", [64, 80, 96, 128])
def test_decode_source_compiles_without_warnings(arch, d):
    defines = A._dec_defines(d)
    if d == 128:   # the L2-prefetch variant the bench compares
        defines = tuple((k, 1 if k == "DEC_L2PF" else v) for k, v in defines)
    oc = _registry.compile_code(A.DEC_SOURCE, defines, target="cubin", arch=arch)
    assert oc.log.strip() == ""
    assert len(oc.code) > 1000
    if d in (64, 128):   # the build of pdl=True plans (griddepcontrol; compiled out below sm_90), the merge variant
        oc = _registry.compile_code(A.DEC_SOURCE, A._dec_defines(d, pdl=True), target="cubin", arch=arch)
        assert oc.log.strip() == "" and len(oc.code) > 1000
        oc = _registry.compile_code(A.DEC_SOURCE, A._dec_defines(d) + (("DEC_MERGE", 0),), target="cubin", arch=arch)
        assert oc.log.strip() == "" and len(oc.code) > 1000
        # the split-finish variants (vector merge, thread-0 sync) and the bench's probe builds: no
        # warnings either
        for extra in ((("DEC_MERGE", 2), ("DEC_SYNC", 1)), (("DEC_CLUSTER", 1),),
                      (("DEC_SYNC", 1), ("DEC_WPIPE", 0)), (("DEC_CLUSTER", 1), ("DEC_WPIPE", 2)), (("DEC_TMA", 1),),
                      (("DEC_TMA", 1), ("DEC_PDL", 1), ("DEC_KPW", 32)),
                      (("DEC_PROBE", 2),),
                      (("DEC_PROBE", 3),)):
            oc = _registry.compile_code(A.DEC_SOURCE, A._dec_defines(d) + extra, target="cubin", arch=arch)
            assert oc.log.strip() == "" and len(oc.code) > 1000, extra


@pytest.mark.kernel_sources
@pytest.mark.parametrize("arch,d", [("sm_90", 64), ("sm_90", 80), ("sm_90", 96), ("sm_90", 128), ("sm_80", 128)])
def test_prefill_source_compiles_without_warnings(arch, d):
    oc = _registry.compile_code(A.PF_SOURCE, A._pf_defines(d), target="cubin", arch=arch)
    assert oc.log.strip() == ""
    if d == 128:   # the Q-in-registers build the bench compares
        defines = tuple((k, {"PF_QREG": 1, "PF_MINB": 3}.get(k, v)) for k, v in A._pf_defines(d))
        oc = _registry.compile_code(A.PF_SOURCE, defines, target="cubin", arch=arch)
        assert oc.log.strip() == ""


def test_kernels_table_lists_every_head_dim():
    for src in (A.DEC_SOURCE, A.PF_SOURCE):
        assert {dict(d)["HEAD_DIM"] for s, n, d in A.KERNELS if s == src} == {64, 80, 96, 128}
    # decode: 3 (warps, stages) builds a head dim (the default and two smaller-smem fallbacks), each
    # module holding decode + append for f16/bf16/f32; prefill: one module a head dim
    assert len([1 for s, n, d in A.KERNELS if s == A.DEC_SOURCE]) == 12
    assert len([1 for s, n, d in A.KERNELS if s == A.PF_SOURCE]) == 4
    assert {s for s, n, d in A.KERNELS} == {A.DEC_SOURCE, A.PF_SOURCE}
    assert all(n == ("attn_prefill_f16", "attn_prefill_bf16") for s, n, d in A.KERNELS if s == A.PF_SOURCE)
    assert all("kv_append_f16" in n and "attn_decode_f32" in n for s, n, d in A.KERNELS if s == A.DEC_SOURCE)


# ------------------------------------------------------------------ CPU: checks on the double
def _bufs(fake, max_ctx=64, n_kv=2, d=64, n_heads=8, dtype="float16"):
    q = bc.empty((n_heads, d), dtype)
    k = bc.empty((max_ctx, n_kv, d), dtype)
    v = bc.empty((max_ctx, n_kv, d), dtype)
    ln = bc.zeros((1,), "int32")
    return q, k, v, ln


def test_decode_checks_raise_before_launch(fake):
    q, k, v, ln = _bufs(fake)
    n0 = fake.launch_count()
    with pytest.raises(TypeError, match="int32"):
        A.attention_decode(q, k, v, bc.zeros((1,), "float32"))
    with pytest.raises(TypeError, match="dtype"):
        A.attention_decode(bc.empty((8, 64), "float32"), k, v, ln)
    with pytest.raises(ValueError, match="multiple"):
        A.attention_decode(bc.empty((7, 64), "float16"), k, v, ln)
    with pytest.raises(ValueError, match="head dim"):
        A.attention_decode(bc.empty((8, 32), "float16"), k, v, ln)
    with pytest.raises(ValueError, match="head_dim"):
        A.attention_decode(bc.empty((8, 40), "float16"), bc.empty((64, 2, 40), "float16"),
                           bc.empty((64, 2, 40), "float16"), ln)
    with pytest.raises(ValueError, match="v_cache"):
        A.attention_decode(q, k, bc.empty((32, 2, 64), "float16"), ln)
    with pytest.raises(TypeError, match="v_cache"):
        A.attention_decode(q, k, bc.empty((64, 2, 64), "bfloat16"), ln)
    with pytest.raises(ValueError, match="out"):
        A.attention_decode(q, k, v, ln, out=bc.empty((8, 63), "float16"))
    with pytest.raises(ValueError, match="n_splits"):
        A.attention_decode(q, k, v, ln, n_splits=0)
    with pytest.raises(ValueError, match="pages"):
        A.attention_decode(q, k, v, ln, block_table=bc.zeros((4,), "int32"))
    with pytest.raises(ValueError, match="kv_layout"):
        A.attention_decode(q, k, v, ln, kv_layout="sideways")
    with pytest.raises(ValueError, match="multiple"):
        A.attention_decode(q, k, v, ln, kv_layout="head_major")     # read as 64 heads of 2 tokens
    with pytest.raises(ValueError, match="workspace"):
        A.attention_decode(q, k, v, ln, n_splits=4, workspace=bc.zeros((16,), "uint8"))
    assert fake.launch_count() == n0


def test_decode_launch_geometry_on_the_double(fake):
    q, k, v, ln = _bufs(fake, max_ctx=1024, n_kv=2, d=64, n_heads=8)
    out = bc.empty((8, 64), "float16")
    A.attention_decode(q, k, v, ln, out=out, n_splits=5)
    la = fake.last_launch()
    assert la.name == "attn_decode_f16"
    assert la.grid == (5, 2, 1) and la.block == (A.DEC_WARPS * 32, 1, 1)
    assert la.shared == A.decode_smem(64, 4)
    # q, k, v, out, part, counters, len
    ptrs = struct.unpack_from("<7Q", la.params, 0)
    assert ptrs[0] == q.ptr and ptrs[1] == k.ptr and ptrs[2] == v.ptr and ptrs[3] == out.ptr and ptrs[6] == ln.ptr
    assert ptrs[5] - ptrs[4] == 4 * 8 * 5 * 65
    # the GQA group is a run-time argument (one module per head dim serves every group), then
    # pf_keys (0: no pre-wait prefetch outside pdl plans)
    assert struct.unpack_from("<2i", la.params, 112) == (4, 0)
    # then the batch's strides (q, out, cache, table, workspace): a single sequence moves nothing
    assert len(la.params) == 160 and struct.unpack_from("<3qi4xq", la.params, 120) == (0, 0, 0, 0, 0)
    assert not la.programmatic_serialization
    # one split: no workspace, null partial pointers
    A.attention_decode(q, k, v, ln, out=out, n_splits=1)
    la = fake.last_launch()
    assert struct.unpack_from("<2Q", la.params, 32) == (0, 0)


def test_decode_small_shared_memory_gpus_get_a_shallower_pipeline(fake, monkeypatch):
    """sm_86/sm_89 allow 99 KB of shared memory a block: the decode kernel drops to
    SMALL_DEC_STAGES there instead of failing to launch (the double reports 99 KB here)."""
    from barecuda.kernels import _matmul as MM
    monkeypatch.setattr(MM, "_smem_optin", {0: 101376})
    q, k, v, ln = _bufs(fake, max_ctx=1024, n_kv=2, d=128, n_heads=8)
    assert A.decode_smem(128, 4) > 101376
    A.attention_decode(q, k, v, ln, n_splits=4)
    la = fake.last_launch()
    assert la.name == "attn_decode_f16" and la.shared == A.decode_smem(128, 4, A.SMALL_DEC_STAGES, 4) <= 101376
    assert la.block == (4 * 32, 1, 1)


def test_decode_pipeline_fallbacks_by_shared_memory(fake, monkeypatch):
    """A default pipeline with more warps (8 warps x 3 stages: 209 KB at head dim 128) falls back
    to 4 warps x 4 stages where a block gets 163 KB (sm_80) and to 4 warps x SMALL_DEC_STAGES at
    99 KB (sm_86/89); the block size, shared memory and default splits follow the choice."""
    from barecuda.kernels import _matmul as MM
    monkeypatch.setattr(A, "DEC_WARPS", 8)
    monkeypatch.setattr(A, "DEC_STAGES", 3)
    A._sms.clear()
    assert A._dec_configs() == [(8, 3), (4, 4), (4, A.SMALL_DEC_STAGES)]
    q, k, v, ln = _bufs(fake, max_ctx=4096, n_kv=2, d=128, n_heads=8)
    for optin, want in ((232448, (8, 3)), (166912, (4, 4)), (101376, (4, A.SMALL_DEC_STAGES))):
        monkeypatch.setattr(MM, "_smem_optin", {0: optin})
        A.attention_decode(q, k, v, ln, n_splits=4)
        la = fake.last_launch()
        w, st = want
        assert la.block == (w * 32, 1, 1) and la.shared == A.decode_smem(128, 4, st, w) <= optin, (optin, la.shared)
    A._sms.clear()


def test_decode_cluster_plan_on_the_double(fake, monkeypatch):
    """DEC_CLUSTER=1 (opt-in; correct and slower on the H200, 2026-11-27 09:51): on
    sm_90 a plan with 2..16 splits launches the DEC_CLUSTER build with the splits of each KV
    head as one cluster (non-portable above 8) and no workspace, and becomes a graph node with
    its cluster; the op function, PDL plans, more than 16 splits and devices below 9.0 keep the
    plain split launch."""
    from barecuda.kernels import _matmul as MM
    monkeypatch.setattr(A, "DEC_CLUSTER", 1)
    monkeypatch.setattr(MM, "_ccs", {0: (9, 0)})
    A._sms.clear()
    q, k, v, ln = _bufs(fake, max_ctx=4096, n_kv=2, d=128, n_heads=8)
    out = bc.empty((8, 128), "float16")
    for ns in (16, 5):
        plan = A.plan_attention_decode(q, k, v, ln, out=out, n_splits=ns)
        plan()
        la = fake.last_launch()
        assert la.name == "attn_decode_f16" and la.cluster == (ns, 1, 1) and la.grid == (ns, 2, 1)
        assert struct.unpack_from("<2Q", la.params, 32) == (0, 0)        # no partials, no counters
        assert la.shared == A.decode_smem(128, 4, cluster=True)
    assert bc.Graph().add_plan(plan).kind == "kernel"
    plain = [lambda: A.plan_attention_decode(q, k, v, ln, out=out, n_splits=17)(),
             lambda: A.plan_attention_decode(q, k, v, ln, out=out, n_splits=4, pdl=True)(),
             lambda: A.attention_decode(q, k, v, ln, out=out, n_splits=4)]
    for f in plain:
        f()
        assert fake.last_launch().cluster in ((0, 0, 0), (1, 1, 1))
    monkeypatch.setattr(MM, "_ccs", {0: (8, 0)})
    A.plan_attention_decode(q, k, v, ln, out=out, n_splits=4)()
    assert fake.last_launch().cluster in ((0, 0, 0), (1, 1, 1))
    A._sms.clear()


def test_decode_pdl_plan_on_the_double(fake, monkeypatch):
    """plan_attention_decode(pdl=True): one cuLaunchKernelEx with programmatic stream
    serialization, the pre-wait prefetch length as the last argument (0 for a paged cache),
    PDL_STAGES / PDL_OCC for its depth and default splits; the float32 kernel (no
    griddepcontrol.wait) stays a plain launch; graph.add_plan takes the configured plan as a kernel node."""
    monkeypatch.setattr(A, "PDL_PF_KEYS", 256)
    assert ("DEC_PDL", 1) in A._dec_defines(64, pdl=True) and ("DEC_PDL", 1) not in A._dec_defines(64)
    q, k, v, ln = _bufs(fake, max_ctx=1024, n_kv=2, d=64, n_heads=8)
    out = bc.empty((8, 64), "float16")
    plan = A.plan_attention_decode(q, k, v, ln, out=out, n_splits=4, pdl=True)
    plan()
    la = fake.last_launch()
    assert la.name == "attn_decode_f16" and la.programmatic_serialization
    assert la.grid == (4, 2, 1) and la.shared == A.decode_smem(64, 4, A.PDL_STAGES)
    assert struct.unpack_from("<i", la.params, 116)[0] == A.PDL_PF_KEYS     # pf_keys, before the batch strides
    plain = A.plan_attention_decode(q, k, v, ln, out=out, n_splits=4)
    plain()
    assert not fake.last_launch().programmatic_serialization
    node = bc.Graph().add_plan(plan)     # a kernel node (programmatic edges from the kernel nodes it depends on)
    assert node.kind == "kernel"
    tab = bc.zeros((8,), "int32")
    pk = bc.empty((8, 128, 2, 64), "float16")
    A.plan_attention_decode(q, pk, pk, ln, out=out, block_table=tab, n_splits=2, pdl=True)()
    la = fake.last_launch()
    assert la.programmatic_serialization and struct.unpack_from("<i", la.params, 116)[0] == 0
    f32 = A.plan_attention_decode(bc.empty((8, 64), "float32"), bc.empty((64, 2, 64), "float32"),
                                  bc.empty((64, 2, 64), "float32"), ln, pdl=True)
    f32()
    assert fake.last_launch().name == "attn_decode_f32" and not fake.last_launch().programmatic_serialization


def test_decode_pdl_stages_and_default_splits(fake, monkeypatch):
    """A shallower PDL pipeline (two grids' blocks on one multiprocessor) keeps the default
    split count of one block a multiprocessor (PDL_OCC), not the occupancy's."""
    q, k, v, ln = _bufs(fake, max_ctx=8192, n_kv=2, d=128, n_heads=8)
    out = bc.empty((8, 128), "float16")
    A.plan_attention_decode(q, k, v, ln, out=out)()
    g_plain = fake.last_launch().grid
    monkeypatch.setattr(A, "PDL_STAGES", 3)
    A._sms.clear()
    A.plan_attention_decode(q, k, v, ln, out=out, pdl=True)()
    la = fake.last_launch()
    assert la.shared == A.decode_smem(128, 4, 3) and la.programmatic_serialization
    assert la.grid == g_plain, (la.grid, g_plain)


def test_decode_plan_replays_the_same_launch(fake):
    q, k, v, ln = _bufs(fake, max_ctx=256)
    out = bc.empty((8, 64), "float16")
    plan = A.plan_attention_decode(q, k, v, ln, out=out, n_splits=3)
    n0 = fake.launch_count()
    plan()
    plan()
    assert fake.launch_count() == n0 + 2
    assert fake.last_launch().grid == (3, 2, 1)


def test_append_and_prefill_checks(fake):
    q, k, v, ln = _bufs(fake)
    kn = bc.empty((2, 64), "float16")
    n0 = fake.launch_count()
    with pytest.raises(ValueError, match="k_new"):
        A.kv_append(bc.empty((3, 64), "float16"), kn, k, v, ln)
    with pytest.raises(TypeError, match="k_new"):
        A.kv_append(bc.empty((2, 64), "bfloat16"), kn, k, v, ln)
    with pytest.raises(ValueError, match="rank|expected"):
        A.attention_prefill(bc.empty((4, 64), "float16"), k, v)
    with pytest.raises(ValueError, match="multiple"):
        A.attention_prefill(bc.empty((16, 3, 64), "float16"), bc.empty((16, 2, 64), "float16"),
                            bc.empty((16, 2, 64), "float16"))
    with pytest.raises(ValueError, match="k/v"):
        A.attention_prefill(bc.empty((16, 4, 64), "float16"), bc.empty((16, 2, 64), "float16"),
                            bc.empty((15, 2, 64), "float16"))
    assert fake.launch_count() == n0
    A.kv_append(kn, kn, k, v, ln, pos_offset=0)
    assert fake.last_launch().name == "kv_append_f16"
    out = A.attention_prefill(bc.empty((100, 4, 64), "bfloat16"), bc.empty((100, 2, 64), "bfloat16"),
                              bc.empty((100, 2, 64), "bfloat16"))
    la = fake.last_launch()
    assert la.name == "attn_prefill_bf16" and la.grid == ((100 + 16 * A.PF_WARPS - 1) // (16 * A.PF_WARPS), 4, 1)
    assert tuple(out.shape) == (100, 4, 64)


def test_float32_decode_and_append_dispatch(fake):
    """float32 caches take the plain kernels: one block per query head, no split, no
    workspace (n_splits is ignored); kv_append copies 16-byte chunks of 4 floats."""
    q, k, v, ln = _bufs(fake, max_ctx=512, n_kv=2, d=80, n_heads=6, dtype="float32")
    out = bc.empty((6, 80), "float32")
    A.attention_decode(q, k, v, ln, out=out, len_offset=1, n_splits=4)
    la = fake.last_launch()
    assert la.name == "attn_decode_f32" and la.grid == (6, 1, 1) and la.block == (A.DEC_WARPS * 32, 1, 1)
    ptrs = struct.unpack_from("<5Q", la.params, 0)
    assert ptrs == (q.ptr, k.ptr, v.ptr, out.ptr, ln.ptr)
    assert struct.unpack_from("<i", la.params, 84)[0] == 3       # the GQA group (then scale, the batch strides)
    plan = A.plan_attention_decode(q, k, v, ln, out=out, kv_layout="token_major")
    n0 = fake.launch_count()
    plan()
    assert fake.launch_count() == n0 + 1 and fake.last_launch().name == "attn_decode_f32"
    kn = bc.empty((2, 80), "float32")
    A.kv_append(kn, kn, k, v, ln)
    la = fake.last_launch()
    assert la.name == "kv_append_f32" and la.grid[0] * la.block[0] >= 2 * 80 // 4
    with pytest.raises(TypeError, match="k_new"):
        A.kv_append(bc.empty((2, 80), "float16"), kn, k, v, ln)
    with pytest.raises(TypeError, match="dtype"):
        A.attention_decode(bc.empty((6, 80), "float16"), k, v, ln)


# ------------------------------------------------------------------ GPU
def _decode_case(rng, dtype, d, n_heads, n_kv, max_ctx, length, n_splits=None, paged=None, s=None):
    q32 = rng.standard_normal((n_heads, d)).astype(np.float32)
    k32 = rng.standard_normal((max_ctx, n_kv, d)).astype(np.float32)
    v32 = rng.standard_normal((max_ctx, n_kv, d)).astype(np.float32)
    qd, q = to_dev(q32, dtype, s)
    kd, k = to_dev(k32, dtype, s)
    vd, v = to_dev(v32, dtype, s)
    ln = bc.to_device(np.array([length], np.int32), stream=s)
    ref = ref_attention(q[None], k[:length], v[:length], 1 / math.sqrt(d))[0]
    return qd, kd, vd, ln, ref


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 80, 96, 128])
def test_decode_matches_float64_reference(dtype, d):
    rng = np.random.default_rng(d)
    for n_heads, n_kv, max_ctx, length, splits in [(32, 8, 4200, 4099, None), (8, 8, 300, 1, None),
                                                   (28, 4, 1000, 333, 7), (16, 2, 129, 129, 1),
                                                   (12, 1, 5000, 4500, 64), (9, 3, 700, 513, None),
                                                   (16, 1, 200, 150, 3)]:
        qd, kd, vd, ln, ref = _decode_case(rng, dtype, d, n_heads, n_kv, max_ctx, length)
        out = A.attention_decode(qd, kd, vd, ln, n_splits=splits)
        got = from_dev(out, dtype)
        err = np.abs(got - ref).max()
        assert err < 1e-2, (n_heads, n_kv, length, splits, err)


@gpu
@pytest.mark.parametrize("min_chunk,one_split", [(64, 0), (128, 256), (512, 0), (64, 1000)])
def test_decode_min_chunk_short_and_split_contexts(min_chunk, one_split, monkeypatch):
    """DEC_MINCHUNK (keys a split takes at least) and DEC_ONESPLIT (contexts up to this run in
    one split): a short context in a large cache runs in one split with the default n_splits
    (the direct write, no merge) or several; longer ones still merge. Every build matches the
    reference, the length read from the device."""
    monkeypatch.setattr(A, "DEC_MINCHUNK", min_chunk)
    monkeypatch.setattr(A, "DEC_ONESPLIT", one_split)
    rng = np.random.default_rng(min_chunk)
    for d, n_heads, n_kv, max_ctx, length, splits in [(64, 32, 8, 2048, 129, None), (128, 32, 8, 2048, 129, None),
                                                      (128, 32, 8, 2048, 1, None), (128, 32, 8, 2048, 700, None),
                                                      (64, 8, 2, 2048, 257, 16), (128, 32, 8, 2048, 1999, 5)]:
        qd, kd, vd, ln, ref = _decode_case(rng, "bfloat16", d, n_heads, n_kv, max_ctx, length)
        out = A.attention_decode(qd, kd, vd, ln, n_splits=splits)
        out2 = A.attention_decode(qd, kd, vd, ln, n_splits=splits)                # counters re-armed
        for o in (out, out2):
            err = np.abs(from_dev(o, "bfloat16") - ref).max()
            assert err < 1e-2, (min_chunk, one_split, d, length, splits, err)


@gpu
@pytest.mark.parametrize("d", [64, 80, 96, 128])
def test_float32_decode_and_append_match_float64_reference(d):
    """The float32 kernels (the models' fp32 mode): contiguous token- and head-major
    caches, GQA groups, the appended token at the device-held position; error < 1e-4."""
    rng = np.random.default_rng(100 + d)
    for nh, nkv, max_ctx, length, layout in [(32, 8, 300, 257, "token_major"), (9, 3, 100, 1, "head_major"),
                                             (16, 16, 64, 64, "head_major"), (12, 1, 700, 555, "token_major")]:
        shape = (max_ctx, nkv, d) if layout == "token_major" else (nkv, max_ctx, d)
        kd, k = to_dev(rng.standard_normal(shape).astype(np.float32), "float32")
        vd, v = to_dev(rng.standard_normal(shape).astype(np.float32), "float32")
        qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), "float32")
        knd, knew = to_dev(rng.standard_normal((nkv, d)).astype(np.float32), "float32")
        vnd, vnew = to_dev(rng.standard_normal((nkv, d)).astype(np.float32), "float32")
        pos = bc.to_device(np.array([length - 1], np.int32))
        A.kv_append(knd, vnd, kd, vd, pos, kv_layout=layout)
        if layout == "head_major":
            k, v = k.transpose(1, 0, 2).copy(), v.transpose(1, 0, 2).copy()
        k[length - 1], v[length - 1] = knew, vnew
        ref = ref_attention(q[None], k[:length], v[:length], 1 / math.sqrt(d))[0]
        out = A.attention_decode(qd, kd, vd, pos, len_offset=1, kv_layout=layout)
        assert np.abs(from_dev(out, "float32") - ref).max() < 1e-4, (nh, nkv, length, layout)


@gpu
def test_decode_length_from_device_under_graph_capture():
    """Captured once; the int32 length and the cache change between replays; every replay
    matches the reference for the new length (the kv_append'ed token included)."""
    rng = np.random.default_rng(5)
    dtype, d, nh, nkv, max_ctx = "bfloat16", 128, 32, 8, 2048
    s = bc.Stream()
    qd, kd, vd, ln, _ = _decode_case(rng, dtype, d, nh, nkv, max_ctx, 1, s=s)
    kfull = from_dev(kd, dtype).reshape(max_ctx, nkv, d)
    vfull = from_dev(vd, dtype).reshape(max_ctx, nkv, d)
    q = from_dev(qd, dtype).reshape(nh, d)
    pos = bc.to_device(np.array([0], np.int32), stream=s)
    knew32 = rng.standard_normal((nkv, d)).astype(np.float32)
    vnew32 = rng.standard_normal((nkv, d)).astype(np.float32)
    knd, knew = to_dev(knew32, dtype, s)
    vnd, vnew = to_dev(vnew32, dtype, s)
    out = bc.empty((nh, d), dtype, stream=s)
    ws = bc.zeros((A.decode_workspace_size(nh, nkv, d, 16),), "uint8", stream=s)
    s.synchronize()
    with s.capture() as g:
        A.kv_append(knd, vnd, kd, vd, pos, stream=s)
        A.attention_decode(qd, kd, vd, pos, len_offset=1, out=out, n_splits=16, workspace=ws, stream=s)
    g.keep_alive(qd, kd, vd, pos, knd, vnd, out, ws)
    exe = g.instantiate()
    for p in (0, 17, 1000, 2047):
        pos.copy_from(np.array([p], np.int32), stream=s)
        exe.launch(s)
        kfull[p], vfull[p] = knew, vnew
        ref = ref_attention(q[None], kfull[:p + 1], vfull[:p + 1], 1 / math.sqrt(d))[0]
        got = from_dev(out, dtype)
        assert np.abs(got - ref).max() < 1e-2, p
        assert np.array_equal(from_dev(kd, dtype).reshape(max_ctx, nkv, d)[p], knew)


@gpu
@pytest.mark.parametrize("merge,sync", [(2, 0), (0, 1), (2, 1), (2, 2), (0, 2)])
def test_decode_split_finish_variants(merge, sync, monkeypatch):
    """The split-finish variants of the fixed-cost probe: DEC_MERGE=2 (float4 partials, 16 splits
    a round, an online log-sum-exp over rounds), DEC_SYNC=1 (thread 0 alone fences and counts), DEC_SYNC=2
    (thread 0 counts with one acquire-release atomic, no fence). Splits below, at and above
    16, GQA groups 1..16, token- and head-major and paged caches; every plan launched twice (the
    counters re-arm) and once under graph capture with the device-held length changed; torch
    SDPA too where installed."""
    monkeypatch.setattr(A, "DEC_MERGE", merge)
    monkeypatch.setattr(A, "DEC_SYNC", sync)
    A._sms.clear()
    rng = np.random.default_rng(41 + merge + 3 * sync)
    s = bc.Stream()
    for dtype, d, nh, nkv, max_ctx, length, splits, layout in [
            ("bfloat16", 128, 32, 8, 4096, 4096, None, "head_major"),
            ("bfloat16", 128, 32, 8, 4096, 333, None, "head_major"),
            ("float16", 64, 28, 4, 1000, 999, 7, "token_major"),
            ("bfloat16", 128, 12, 1, 6000, 5500, 33, "head_major"),
            ("float16", 96, 16, 1, 9000, 8999, 64, "token_major"),
            ("bfloat16", 64, 9, 3, 700, 513, 3, "head_major"),
            ("float16", 80, 16, 16, 2000, 1500, 16, "token_major")]:
        shape = (max_ctx, nkv, d) if layout == "token_major" else (nkv, max_ctx, d)
        kd, k = to_dev(rng.standard_normal(shape).astype(np.float32), dtype, s)
        vd, v = to_dev(rng.standard_normal(shape).astype(np.float32), dtype, s)
        if layout == "head_major":
            k, v = k.transpose(1, 0, 2).copy(), v.transpose(1, 0, 2).copy()
        qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), dtype, s)
        ln = bc.to_device(np.array([length], np.int32), stream=s)
        ref = ref_attention(q[None], k[:length], v[:length], 1 / math.sqrt(d))[0]
        out = bc.empty((nh, d), dtype, stream=s)
        plan = A.plan_attention_decode(qd, kd, vd, ln, out=out, n_splits=splits, kv_layout=layout, stream=s)
        for _ in range(2):
            plan()
            s.synchronize()
            err = np.abs(from_dev(out, dtype) - ref).max()
            assert err < 1e-2, (merge, sync, dtype, d, nh, nkv, length, splits, layout, err)
    # a paged cache (the speculation is skipped there), several splits
    page, n_pages, length = 32, 40, 1000
    kd, k = to_dev(rng.standard_normal((n_pages, page, 4, 128)).astype(np.float32), "bfloat16", s)
    vd, v = to_dev(rng.standard_normal((n_pages, page, 4, 128)).astype(np.float32), "bfloat16", s)
    table = rng.permutation(n_pages)[:32].astype(np.int32)
    qd, q = to_dev(rng.standard_normal((16, 128)).astype(np.float32), "bfloat16", s)
    ln = bc.to_device(np.array([length], np.int32), stream=s)
    ref = ref_attention(q[None], k[table].reshape(-1, 4, 128)[:length], v[table].reshape(-1, 4, 128)[:length],
                        1 / math.sqrt(128))[0]
    for splits in (6, None):
        out = A.attention_decode(qd, kd, vd, ln, block_table=bc.to_device(table, stream=s), n_splits=splits, stream=s)
        assert np.abs(from_dev(out, "bfloat16") - ref).max() < 1e-2, ("paged", splits)
    # captured once, the length changed between replays (graph property)
    dtype, d, nh, nkv, max_ctx = "bfloat16", 128, 32, 8, 4096
    kd, k = to_dev(rng.standard_normal((nkv, max_ctx, d)).astype(np.float32), dtype, s)
    vd, v = to_dev(rng.standard_normal((nkv, max_ctx, d)).astype(np.float32), dtype, s)
    k, v = k.transpose(1, 0, 2).copy(), v.transpose(1, 0, 2).copy()
    qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), dtype, s)
    pos = bc.to_device(np.array([0], np.int32), stream=s)
    out = bc.empty((nh, d), dtype, stream=s)
    plan = A.plan_attention_decode(qd, kd, vd, pos, out=out, len_offset=1, kv_layout="head_major", stream=s)
    g = bc.Graph()
    g.add_plan(plan)
    g.keep_alive(plan)
    exe = g.instantiate()
    torch = None
    try:
        import torch as _t
        torch = _t if _t.cuda.is_available() else None
    except ImportError:
        pass
    for p in (0, 200, 1000, 4095):
        pos.copy_from(np.array([p], np.int32), stream=s)
        exe.launch(s)
        s.synchronize()
        got = from_dev(out, dtype)
        ref = ref_attention(q[None], k[:p + 1], v[:p + 1], 1 / math.sqrt(d))[0]
        assert np.abs(got - ref).max() < 1e-2, ("graph", p)
        if torch is not None:
            tq = torch.tensor(q, dtype=torch.float32, device="cuda").to(torch.bfloat16)[None, :, None]
            tk = torch.tensor(k[:p + 1].transpose(1, 0, 2), dtype=torch.float32, device="cuda").to(torch.bfloat16)[None]
            tv = torch.tensor(v[:p + 1].transpose(1, 0, 2), dtype=torch.float32, device="cuda").to(torch.bfloat16)[None]
            tref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)[0, :, 0]
            assert np.abs(got - tref.float().cpu().numpy()).max() < 1e-2, ("sdpa", p)


@gpu
def test_decode_cluster_merge_matches_reference(monkeypatch):
    """DEC_CLUSTER=1 plans on sm_90 (the splits of a KV head one cluster, merged through
    distributed shared memory): 16 splits (non-portable cluster) and fewer, empty splits
    (short lengths), GQA groups 1..16, one split used (the direct write), every plan launched
    twice and once from a graph with the device-held length changed. Passed on the H200
    (2026-11-27 09:51, its first run; and 10:08 with the bulk-copy ring)."""
    from barecuda.kernels import _matmul as MM
    if MM._cc(bc.Device()) < (9, 0):
        pytest.skip("thread-block clusters need sm_90")
    monkeypatch.setattr(A, "DEC_CLUSTER", 1)
    A._sms.clear()
    rng = np.random.default_rng(77)
    s = bc.Stream()
    for dtype, d, nh, nkv, max_ctx, length, splits in [("bfloat16", 128, 32, 8, 4096, 4096, 16),
                                                       ("bfloat16", 128, 32, 8, 4096, 333, 16),
                                                       ("float16", 64, 28, 4, 1000, 999, 7),
                                                       ("bfloat16", 128, 16, 1, 3000, 2999, 12),
                                                       ("float16", 96, 9, 3, 700, 513, 3),
                                                       ("bfloat16", 128, 32, 8, 4096, 100, 16)]:
        kd, k = to_dev(rng.standard_normal((nkv, max_ctx, d)).astype(np.float32), dtype, s)
        vd, v = to_dev(rng.standard_normal((nkv, max_ctx, d)).astype(np.float32), dtype, s)
        k, v = k.transpose(1, 0, 2).copy(), v.transpose(1, 0, 2).copy()
        qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), dtype, s)
        ln = bc.to_device(np.array([length], np.int32), stream=s)
        out = bc.empty((nh, d), dtype, stream=s)
        plan = A.plan_attention_decode(qd, kd, vd, ln, out=out, n_splits=splits, kv_layout="head_major", stream=s)
        assert plan.config is not None and plan.config.cluster == (splits, 1, 1)
        ref = ref_attention(q[None], k[:length], v[:length], 1 / math.sqrt(d))[0]
        for _ in range(2):
            plan()
            s.synchronize()
            assert np.abs(from_dev(out, dtype) - ref).max() < 1e-2, (dtype, d, nh, nkv, length, splits)
        g = bc.Graph()
        g.add_plan(plan)
        g.keep_alive(plan)
        exe = g.instantiate()
        for n in (1, length // 2 + 1, length):
            ln.copy_from(np.array([n], np.int32), stream=s)
            exe.launch(s)
            s.synchronize()
            ref = ref_attention(q[None], k[:n], v[:n], 1 / math.sqrt(d))[0]
            assert np.abs(from_dev(out, dtype) - ref).max() < 1e-2, ("graph", d, n)


@gpu
@pytest.mark.parametrize("stages,pf_keys,layout", [(None, 256, "head_major"), (3, 1024, "head_major"),
                                                   (None, 256, "token_major"), (3, 0, "token_major")])
def test_decode_pdl_plans_under_capture(stages, pf_keys, layout, monkeypatch):
    """pdl=True plans captured into one graph, each node reading what the node before it
    writes: kv_append's token (the newest key), then a PDL decode, then a PDL decode whose q
    is that decode's output, then one over a second cache with one split; the device-held
    position changes between replays. Also a PDL plan launched straight on a stream."""
    monkeypatch.setattr(A, "PDL_STAGES", stages)
    monkeypatch.setattr(A, "PDL_PF_KEYS", pf_keys)
    A._sms.clear()
    from barecuda.graph import capture
    rng = np.random.default_rng(23 + (stages or 0) + pf_keys)
    dtype, nh, nkv, max_ctx = "bfloat16", 32, 8, 4100
    for d in (128, 64):
        s = bc.Stream()
        shape = (nkv, max_ctx, d) if layout == "head_major" else (max_ctx, nkv, d)
        kd, k = to_dev(rng.standard_normal(shape).astype(np.float32), dtype, s)
        vd, v = to_dev(rng.standard_normal(shape).astype(np.float32), dtype, s)
        k2d, k2 = to_dev(rng.standard_normal(shape).astype(np.float32), dtype, s)
        if layout == "head_major":
            k, v, k2 = (x.transpose(1, 0, 2).copy() for x in (k, v, k2))
        qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), dtype, s)
        knd, knew = to_dev(rng.standard_normal((nkv, d)).astype(np.float32), dtype, s)
        vnd, vnew = to_dev(rng.standard_normal((nkv, d)).astype(np.float32), dtype, s)
        pos = bc.to_device(np.array([0], np.int32), stream=s)
        o1, o2, o3 = (bc.empty((nh, d), dtype, stream=s) for _ in range(3))
        kw = dict(len_offset=1, kv_layout=layout, pdl=True, stream=s)
        plans = [A.plan_kv_append(knd, vnd, kd, vd, pos, kv_layout=layout, stream=s),
                 A.plan_attention_decode(qd, kd, vd, pos, out=o1, **kw),
                 A.plan_attention_decode(o1, kd, vd, pos, out=o2, n_splits=7, **kw),
                 A.plan_attention_decode(qd, k2d, vd, pos, out=o3, n_splits=1, **kw)]
        assert plans[1].config is not None and plans[1].config.programmatic_serialization
        s.synchronize()
        with capture(s) as g:
            for p in plans:
                p()
        g.keep_alive(plans)
        exe = g.instantiate()
        sc = 1 / math.sqrt(d)
        for p in (0, 17, 255, 1000, 4099):
            pos.copy_from(np.array([p], np.int32), stream=s)
            exe.launch(s)
            k[p], v[p] = knew, vnew
            n = p + 1
            ref1 = ref_attention(q[None], k[:n], v[:n], sc)[0]
            got1 = from_dev(o1, dtype)
            assert np.abs(got1 - ref1).max() < 1e-2, (d, p)
            ref2 = ref_attention(got1[None], k[:n], v[:n], sc)[0]
            assert np.abs(from_dev(o2, dtype) - ref2).max() < 1e-2, (d, p)
            ref3 = ref_attention(q[None], k2[:n], v[:n], sc)[0]
            assert np.abs(from_dev(o3, dtype) - ref3).max() < 1e-2, (d, p)
        # the plan on its own (cuLaunchKernelEx with the attribute, no graph), twice: counters re-armed
        for _ in range(2):
            plans[2]()
            assert np.abs(from_dev(o2, dtype) - ref2).max() < 1e-2, d


@gpu
@pytest.mark.parametrize("warps,stages,pf,kpw,wpipe", [(4, 3, 0, 16, 0), (4, 4, 0, 16, 0), (8, 2, 1, 16, 0),
                                                        (4, A.SMALL_DEC_STAGES, 0, 16, 0),
                                                        (4, 2, 0, 32, 0), (4, 4, 0, 16, 1), (4, 3, 0, 32, 1),
                                                        (8, 3, 0, 16, 1), (8, 3, 0, 16, 2), (4, 4, 0, 16, 2),
                                                        (4, 3, 0, 32, 2), (8, 3, 0, 16, 3), (4, 4, 0, 16, 3),
                                                        (8, 2, 0, 16, 3), (4, A.SMALL_DEC_STAGES, 0, 16, 3),
                                                        (8, 3, 0, 16, 0)])
def test_decode_head_major_layout_and_append(warps, stages, pf, kpw, wpipe, monkeypatch):
    """The [n_kv, max_ctx, D] layout (each head's keys contiguous), the pipelines the bench
    compares (block-wide or per-warp rings, or the block's stages with per-warp copies and waits
    (DEC_WPIPE=2; 3: a stage refilled as soon as its warp read it), 16 or 32 keys a warp); kv_append writes the token
    at the device-held position in that layout."""
    monkeypatch.setattr(A, "DEC_WARPS", warps)
    monkeypatch.setattr(A, "DEC_STAGES", stages)
    monkeypatch.setattr(A, "DEC_L2PF", pf)
    monkeypatch.setattr(A, "DEC_KPW", kpw)
    monkeypatch.setattr(A, "DEC_WPIPE", wpipe)
    rng = np.random.default_rng(11)
    for dtype, d, nh, nkv, max_ctx, length in [("bfloat16", 128, 32, 8, 5000, 4321), ("float16", 64, 16, 2, 700, 65)]:
        k32 = rng.standard_normal((nkv, max_ctx, d)).astype(np.float32)
        v32 = rng.standard_normal((nkv, max_ctx, d)).astype(np.float32)
        kd, k = to_dev(k32, dtype)
        vd, v = to_dev(v32, dtype)
        qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), dtype)
        knd, knew = to_dev(rng.standard_normal((nkv, d)).astype(np.float32), dtype)
        vnd, vnew = to_dev(rng.standard_normal((nkv, d)).astype(np.float32), dtype)
        pos = bc.to_device(np.array([length - 1], np.int32))
        A.kv_append(knd, vnd, kd, vd, pos, kv_layout="head_major")
        k[:, length - 1], v[:, length - 1] = knew, vnew
        ref = ref_attention(q[None], k[:, :length].transpose(1, 0, 2), v[:, :length].transpose(1, 0, 2),
                            1 / math.sqrt(d))[0]
        for splits in (None, 1, 3, 7):
            out = A.attention_decode(qd, kd, vd, pos, len_offset=1, kv_layout="head_major", n_splits=splits)
            assert np.abs(from_dev(out, dtype) - ref).max() < 1e-2, (dtype, d, splits)


@gpu
def test_decode_paged_matches_contiguous_reference():
    rng = np.random.default_rng(9)
    dtype, d, nh, nkv, page, n_pages = "float16", 128, 16, 4, 32, 40
    length = 1000
    k32 = rng.standard_normal((n_pages, page, nkv, d)).astype(np.float32)
    v32 = rng.standard_normal((n_pages, page, nkv, d)).astype(np.float32)
    kd, k = to_dev(k32, dtype)
    vd, v = to_dev(v32, dtype)
    table = rng.permutation(n_pages)[:32].astype(np.int32)
    td = bc.to_device(table)
    qd, q = to_dev(rng.standard_normal((nh, d)).astype(np.float32), dtype)
    ln = bc.to_device(np.array([length], np.int32))
    kl = k[table].reshape(-1, nkv, d)[:length]
    vl = v[table].reshape(-1, nkv, d)[:length]
    ref = ref_attention(q[None], kl, vl, 1 / math.sqrt(d))[0]
    for splits in (1, 6, None):
        out = A.attention_decode(qd, kd, vd, ln, block_table=td, n_splits=splits)
        assert np.abs(from_dev(out, dtype) - ref).max() < 1e-2, splits


@pytest.fixture(params=[(4, 0, 1), (4, 1, 2), (4, 1, 3)], ids=["q-smem", "q-regs-2blk", "q-regs-3blk"])
def pf_variant(request, monkeypatch):
    """Both prefill builds the bench compares (warps, Q in registers, min blocks per SM)."""
    for name, v in zip(("PF_WARPS", "PF_QREG", "PF_MINB"), request.param):
        monkeypatch.setattr(A, name, v)
    return request.param


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 80, 96, 128])
def test_prefill_matches_float64_reference(dtype, d, pf_variant):
    rng = np.random.default_rng(100 + d)
    for sq, nh, nkv, causal, off in [(1, 4, 4, True, 0), (77, 4, 2, True, 0), (200, 6, 3, False, 0),
                                     (130, 8, 1, True, 0), (64, 2, 2, True, 10)]:
        skv = sq + (off if off else 0)
        qd, q = to_dev(rng.standard_normal((sq, nh, d)).astype(np.float32), dtype)
        kd, k = to_dev(rng.standard_normal((skv, nkv, d)).astype(np.float32), dtype)
        vd, v = to_dev(rng.standard_normal((skv, nkv, d)).astype(np.float32), dtype)
        out = A.attention_prefill(qd, kd, vd, causal=causal, causal_offset=off)
        ref = ref_attention(q, k, v, 1 / math.sqrt(d), causal, off)
        err = np.abs(from_dev(out, dtype).reshape(ref.shape) - ref).max()
        assert err < 1e-2, (sq, nh, nkv, causal, off, err)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_prefill_and_decode_match_torch_sdpa(dtype, pf_variant):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    tdt = getattr(torch, dtype)
    torch.manual_seed(0)
    b, s_, h, hkv, d = 2, 1029, 32, 8, 128
    q = torch.randn(b, s_, h, d, device="cuda", dtype=tdt)
    k = torch.randn(b, s_, hkv, d, device="cuda", dtype=tdt)
    v = torch.randn(b, s_, hkv, d, device="cuda", dtype=tdt)
    out = torch.empty_like(q)
    A.attention_prefill(q, k, v, causal=True, out=out)
    torch.cuda.synchronize()
    kr = k.repeat_interleave(h // hkv, dim=2)
    vr = v.repeat_interleave(h // hkv, dim=2)
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2),
                                         is_causal=True).transpose(1, 2)
    assert (out.float() - ref.float()).abs().max().item() < 1e-2
    # decode: the last query row of batch 0 against the whole prefix
    ln = torch.tensor([s_], dtype=torch.int32, device="cuda")
    o1 = torch.empty(h, d, device="cuda", dtype=tdt)
    A.attention_decode(q[0, -1].contiguous(), k[0].contiguous(), v[0].contiguous(), ln, out=o1)
    torch.cuda.synchronize()
    assert (o1.float() - ref[0, -1].float()).abs().max().item() < 1e-2
