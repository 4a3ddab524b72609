"""Batched decode (csrc/attention_decode.cu's entries, grid.z a sequence; kernels/_attention.py's
_batch): B sequences of their own lengths over contiguous ``[B, max_ctx, n_kv, D]`` caches
(token- or head-major) or over one pool of pages with a ``[B, pages]`` table, in one launch,
and kv_append writing each sequence's token at its own position.

CPU: the launch's grid and batch strides on the driver double, the checks that raise before a
launch, a 3-D q beside an unbatched cache staying one sequence.
GPU (--gpu): each sequence against the float64 reference of its own q, cache and length
(float16, bfloat16, float32), the splits' merge per sequence, a plan replayed after the
lengths change on the device.
"""
import math
import struct

import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _attention as A

from _attention_helpers import ref_attention
from _matmul_helpers import fake, from_dev, to_dev  # noqa: F401 (fake: a fixture)

gpu = pytest.mark.gpu

# attn_decode_<16-bit>'s parameter block: ..., group (112), pf_keys (116), then q_seq, o_seq,
# seq_stride (long long), bt_stride (int), ws_stride (long long)
_BATCH_AT, _BATCH_FMT = 120, "<3qi4xq"


def test_batch_decode_launch_on_the_double(fake):
    nb, nh, nkv, d, ctx = 3, 8, 2, 64, 1024
    q = bc.empty((nb, nh, d), "float16")
    k = bc.empty((nb, ctx, nkv, d), "float16")
    ln = bc.zeros((nb,), "int32")
    out = A.attention_decode(q, k, k, ln, n_splits=5)
    assert tuple(out.shape) == (nb, nh, d)
    la = fake.last_launch()
    assert la.name == "attn_decode_f16" and la.grid == (5, nkv, nb)
    ws_words = A.decode_workspace_size(nh, nkv, d, 5) // 4
    assert struct.unpack_from(_BATCH_FMT, la.params, _BATCH_AT) == (nh * d, nh * d, ctx * nkv * d, 0, ws_words)
    part, counters = struct.unpack_from("<2Q", la.params, 32)
    assert counters - part == 4 * nh * 5 * (d + 1)       # sequence 0's counters; sequence b's ws_words later
    # head-major caches: the sequence stride is the same whole cache
    A.attention_decode(q, bc.empty((nb, nkv, ctx, d), "float16"), bc.empty((nb, nkv, ctx, d), "float16"), ln,
                       n_splits=1, kv_layout="head_major")
    la = fake.last_launch()
    assert la.grid == (1, nkv, nb) and struct.unpack_from(_BATCH_FMT, la.params, _BATCH_AT)[2] == ctx * nkv * d
    # paged: one pool, a [B, pages] table (row stride in entries), no cache stride
    pages = bc.empty((40, 32, nkv, d), "float16")
    tab = bc.zeros((nb, 8), "int32")
    A.attention_decode(q, pages, pages, ln, block_table=tab, n_splits=2)
    la = fake.last_launch()
    assert la.grid == (2, nkv, nb)
    assert struct.unpack_from(_BATCH_FMT, la.params, _BATCH_AT)[2:4] == (0, 8)
    assert struct.unpack_from("<i", la.params, 60)[0] == 8 * 32     # max_ctx: a table row's pages
    # the default split count fills one wave with the batch's blocks: fewer splits a sequence
    big = 16384
    A.attention_decode(bc.empty((nh, d), "float16"), bc.empty((big, nkv, d), "float16"),
                       bc.empty((big, nkv, d), "float16"), bc.zeros((1,), "int32"))
    one = fake.last_launch().grid[0]
    kb = bc.empty((nb, big, nkv, d), "float16")
    A.attention_decode(q, kb, kb, ln)
    assert fake.last_launch().grid[0] * nb <= one + nb and fake.last_launch().grid[0] < one, (one, fake.last_launch().grid)


def test_batch_decode_float32_and_append_on_the_double(fake):
    nb, nh, nkv, d, ctx = 4, 6, 2, 80, 256
    q = bc.empty((nb, nh, d), "float32")
    k = bc.empty((nb, ctx, nkv, d), "float32")
    ln = bc.zeros((nb,), "int32")
    A.attention_decode(q, k, k, ln)
    la = fake.last_launch()
    assert la.name == "attn_decode_f32" and la.grid == (nh, 1, nb)
    # q_seq, o_seq, seq_stride (long long) at 96, bt_stride at 120
    assert struct.unpack_from("<3qi", la.params, 96) == (nh * d, nh * d, ctx * nkv * d, 0)
    for dt in ("float32", "float16"):
        kc = bc.empty((nb, ctx, nkv, d), dt)
        kn = bc.empty((nb, nkv, d), dt)
        A.kv_append(kn, kn, kc, kc, ln)
        la = fake.last_launch()
        assert la.grid[1:] == (nb, 1) and la.name.startswith("kv_append_")
        # ..., n_kv (84), then src_seq, seq_stride (long long) and bt_stride
        assert struct.unpack_from("<i2qi", la.params, 84) == (nkv, nkv * d, ctx * nkv * d, 0)


def test_batch_checks_raise_before_launch(fake):
    nb, nh, nkv, d, ctx = 3, 8, 2, 64, 128
    q = bc.empty((nb, nh, d), "float16")
    k = bc.empty((nb, ctx, nkv, d), "float16")
    ln = bc.zeros((nb,), "int32")
    n0 = fake.launch_count()
    with pytest.raises(ValueError, match="length: 1 entries for a batch of 3"):
        A.attention_decode(q, k, k, bc.zeros((1,), "int32"))
    with pytest.raises(ValueError, match="2/2 sequences for a batch of 3"):
        A.attention_decode(q, bc.empty((2, ctx, nkv, d), "float16"), bc.empty((2, ctx, nkv, d), "float16"), ln)
    with pytest.raises(ValueError, match="block_table: 2 rows for a batch of 3"):
        A.attention_decode(q, bc.empty((8, 16, nkv, d), "float16"), bc.empty((8, 16, nkv, d), "float16"), ln,
                           block_table=bc.zeros((2, 4), "int32"))
    with pytest.raises(ValueError, match="out"):
        A.attention_decode(q, k, k, ln, out=bc.empty((nh, d), "float16"))
    with pytest.raises(ValueError, match="pos: 2 entries for a batch of 3"):
        A.kv_append(bc.empty((nb, nkv, d), "float16"), bc.empty((nb, nkv, d), "float16"), k, k,
                    bc.zeros((2,), "int32"))
    with pytest.raises(ValueError, match="v_new"):
        A.kv_append(bc.empty((nb, nkv, d), "float16"), bc.empty((nkv, d), "float16"), k, k, ln)
    assert fake.launch_count() == n0


def test_three_d_q_beside_one_cache_stays_one_sequence(fake):
    """A [1, n_heads, D] q with a 3-D cache is one sequence's rows, as before batches existed."""
    q = bc.empty((1, 8, 64), "float16")
    k = bc.empty((64, 2, 64), "float16")
    A.attention_decode(q, k, k, bc.zeros((1,), "int32"), n_splits=2)
    la = fake.last_launch()
    assert la.grid == (2, 2, 1) and struct.unpack_from(_BATCH_FMT, la.params, _BATCH_AT) == (0, 0, 0, 0, 0)


# ------------------------------------------------------------------ GPU
def _batch_case(rng, dtype, d, nh, nkv, ctx, lengths, layout="token_major", paged=None):
    """Device q [B, nh, d], caches (contiguous [B, ...] or a page pool + [B, P] table), lengths;
    and per sequence the float64 q, K and V in token order."""
    nb = len(lengths)
    qd, q = to_dev(rng.standard_normal((nb, nh, d)), dtype)
    if paged:
        page, n_pages = paged
        kd, k = to_dev(rng.standard_normal((n_pages, page, nkv, d)), dtype)
        vd, v = to_dev(rng.standard_normal((n_pages, page, nkv, d)), dtype)
        per = ctx // page
        table = rng.permutation(n_pages)[:nb * per].astype(np.int32).reshape(nb, per)
        seqs = [(k[table[b]].reshape(-1, nkv, d), v[table[b]].reshape(-1, nkv, d)) for b in range(nb)]
        extra = {"block_table": bc.to_device(table)}
    else:
        shape = (nb, ctx, nkv, d) if layout == "token_major" else (nb, nkv, ctx, d)
        kd, k = to_dev(rng.standard_normal(shape), dtype)
        vd, v = to_dev(rng.standard_normal(shape), dtype)
        if layout == "head_major":
            k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
        seqs = [(k[b].copy(), v[b].copy()) for b in range(nb)]
        extra = {"kv_layout": layout}
    ln = bc.to_device(np.array(lengths, np.int32))
    return qd, q, kd, vd, ln, seqs, extra


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("d", [64, 128])
def test_batch_decode_matches_float64_reference(dtype, d):
    rng = np.random.default_rng(d + len(dtype))
    tol = 1e-4 if dtype == "float32" else 1e-2
    for nh, nkv, ctx, lengths, splits, layout, paged in [
            (32, 8, 4096, [4096, 1, 2500, 129], None, "token_major", None),
            (8, 2, 1024, [1000, 17, 1024], 6, "head_major", None),
            (12, 4, 512, [300, 512, 1, 77, 256], 1, "token_major", None),
            (16, 4, 1024, [1000, 33, 640], None, "token_major", (32, 100)),
            (9, 3, 512, [511, 200], 3, "token_major", (16, 70))]:
        qd, q, kd, vd, ln, seqs, extra = _batch_case(rng, dtype, d, nh, nkv, ctx, lengths, layout, paged)
        for rep in range(2):                               # the second: counters re-armed per sequence
            out = A.attention_decode(qd, kd, vd, ln, n_splits=splits, **extra)
            got = from_dev(out, dtype)
            for b, n in enumerate(lengths):
                kb, vb = seqs[b]
                ref = ref_attention(q[b][None], kb[:n], vb[:n], 1 / math.sqrt(d))[0]
                err = np.abs(got[b] - ref).max()
                assert err < tol, (dtype, d, nh, nkv, lengths, splits, layout, paged, b, rep, err)


@gpu
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_batch_append_then_decode_plan_replays_new_lengths(dtype):
    """One decode step for 3 sequences: kv_append writes each new token at its own position
    (pos [B]), the decode plan reads length = pos + 1; then the positions move on the device
    and the same plans replay (graph-ready: nothing about the step is a host argument)."""
    rng = np.random.default_rng(5)
    nb, nh, nkv, d, ctx = 3, 16, 4, 128, 600
    qd, q, kd, vd, ln, seqs, _ = _batch_case(rng, dtype, d, nh, nkv, ctx, [1] * nb)
    kc = [s[0] for s in seqs]
    vc = [s[1] for s in seqs]
    s = bc.Stream()
    out = bc.empty((nb, nh, d), dtype)
    knd = bc.empty((nb, nkv, d), dtype)
    vnd = bc.empty((nb, nkv, d), dtype)
    pos = bc.zeros((nb,), "int32")
    app = A.plan_kv_append(knd, vnd, kd, vd, pos, stream=s)
    dec = A.plan_attention_decode(qd, kd, vd, pos, out=out, len_offset=1, stream=s)
    for positions in ([0, 5, 599], [300, 6, 10]):
        kn = rng.standard_normal((nb, nkv, d))
        vn = rng.standard_normal((nb, nkv, d))
        kn_d, kn64 = to_dev(kn, dtype)
        vn_d, vn64 = to_dev(vn, dtype)
        knd.copy_from(kn_d)
        vnd.copy_from(vn_d)
        pos.copy_from(bc.to_device(np.array(positions, np.int32)))
        bc.Device().synchronize()
        app()
        dec()
        s.synchronize()
        got = from_dev(out, dtype)
        for b, p in enumerate(positions):
            kc[b][p], vc[b][p] = kn64[b], vn64[b]
            ref = ref_attention(q[b][None], kc[b][:p + 1], vc[b][:p + 1], 1 / math.sqrt(d))[0]
            err = np.abs(got[b] - ref).max()
            assert err < (1e-4 if dtype == "float32" else 1e-2), (positions, b, err)
