"""barecuda.models.reference: the float64 numpy Llama.

On the real SmolLM2 file: it answers sensibly. On tiny random files: the KV-cache path
equals a full forward, and the model equals an independent HF-layout formulation
(un-permuted Q/K rows, rotate-half RoPE, llama3 factors), which checks the GGUF row
permutation convention the GPU decoder relies on.
"""
import math

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("gguf")

from barecuda.models import gguf as G  # noqa: E402
from barecuda.models import reference as R  # noqa: E402


def test_capital_of_france(smollm_reference, smollm_tokenizer):
    m, tk = smollm_reference, smollm_tokenizer
    m.reset()
    out = m.generate(tk.encode("The capital of France is"), 6)
    assert "Paris" in tk.decode(out)


def test_chat_answer(smollm_reference, smollm_tokenizer):
    m, tk = smollm_reference, smollm_tokenizer
    m.reset()
    prompt = tk.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    out = m.generate(tk.encode(prompt), 16, stop=tk.stop_ids)
    text = tk.decode(out, skip_special=True)
    assert "Paris" in text, text
    assert out[-1] in tk.stop_ids, text      # a short answer, then <|im_end|>


def _hf_forward(f, tokens):
    """Llama as HF writes it: q/k rows un-permuted back to HF order, rope on the two halves."""
    cfg = R.LlamaConfig.from_gguf(f)
    W = lambda n: R.dequantize_tensor(f.tensor(n)).astype(np.float64)
    hd, nh, nkv = cfg.head_dim, cfg.n_head, cfg.n_head_kv

    def unpermute(w, heads):       # inverse of convert_hf_to_gguf.py's LlamaModel.permute
        return w.reshape(heads, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    inv = 1.0 / cfg.rope_base ** (np.arange(0, hd, 2) / hd)
    if "rope_freqs.weight" in f.tensors:
        inv = inv / W("rope_freqs.weight")
    T = len(tokens)
    x = W("token_embd.weight")[tokens]
    ang = np.arange(T)[:, None] * inv[None]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None]
    rot = lambda t: np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], -1)
    norm = lambda t, w: t / np.sqrt((t * t).mean(-1, keepdims=True) + cfg.eps) * w
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        h = norm(x, W(p + "attn_norm.weight"))
        q = (h @ unpermute(W(p + "attn_q.weight"), nh).T).reshape(T, nh, hd)
        k = (h @ unpermute(W(p + "attn_k.weight"), nkv).T).reshape(T, nkv, hd)
        v = (h @ W(p + "attn_v.weight").T).reshape(T, nkv, hd)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        o = np.zeros((T, nh, hd))
        for t in range(T):
            for hh in range(nh):
                kv = hh // (nh // nkv)
                s = k[:t + 1, kv] @ q[t, hh] / math.sqrt(hd)
                a = np.exp(s - s.max())
                o[t, hh] = (a / a.sum()) @ v[:t + 1, kv]
        x = x + o.reshape(T, -1) @ W(p + "attn_output.weight").T
        h = norm(x, W(p + "ffn_norm.weight"))
        g, u = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
    out = W("output.weight") if "output.weight" in f.tensors else W("token_embd.weight")
    return norm(x, W("output_norm.weight")) @ out.T


@pytest.mark.parametrize("qt", ["F32", "Q4_K", "Q6_K"])
def test_matches_hf_layout_model(tiny_ggufs, qt):
    """GGUF's permuted Q/K rows + adjacent-pair rope == HF's rows + rotate-half rope."""
    f = G.open_gguf(tiny_ggufs[qt])
    assert "rope_freqs.weight" in f.tensors        # llama3 frequency factors exercised
    toks = [3, 17, 250, 9, 9, 511, 42]
    m = R.ReferenceLlama(f, max_seq=16)
    ref = m.forward(toks)
    hf = _hf_forward(f, toks)
    assert np.max(np.abs(ref - hf)) < 1e-9 * np.max(np.abs(hf))


def test_kv_cache_steps_equal_full_forward(tiny_ggufs):
    f = G.open_gguf(tiny_ggufs["Q8_0"])
    toks = [5, 6, 7, 300, 1, 2, 99, 100, 13]
    m = R.ReferenceLlama(f, max_seq=16)
    full = m.forward(toks)
    m.reset()
    steps = np.concatenate([m.forward(toks[:4])] + [m.forward([t]) for t in toks[4:]])
    assert np.max(np.abs(full - steps)) < 1e-10
    with pytest.raises(ValueError, match="KV cache holds 16"):
        m.forward(list(range(8)))


def test_sample_logits():
    rng = np.random.default_rng()
    x = rng.standard_normal(50)
    assert R.sample_logits(x, temperature=0) == int(np.argmax(x))
    assert R.sample_logits(x, temperature=1.0, top_k=1, u=0.99) == int(np.argmax(x))
    # the inverse CDF over a fine grid of u reproduces the softmax at temperature 0.7
    us = (np.arange(20000) + 0.5) / 20000
    counts = np.bincount([R.sample_logits(x, temperature=0.7, u=u) for u in us], minlength=50) / us.size
    assert np.max(np.abs(counts - R.softmax(x / 0.7))) < 1e-3
    # ... in token-id order
    assert R.sample_logits(x, u=0.0) == 0 and R.sample_logits(x, u=0.999999) == 49
    # top-p keeps the smallest prefix (by probability) reaching p; top-k the k largest
    p = R.softmax(x)
    order = np.argsort(-p)
    keep = int(np.searchsorted(np.cumsum(p[order]), 0.5) + 1)
    assert {R.sample_logits(x, top_p=0.5, u=u) for u in us[::50]} == set(order[:keep].tolist())
    assert {R.sample_logits(x, top_k=3, u=u) for u in us[::50]} == set(order[:3].tolist())
    both = {R.sample_logits(x, top_k=5, top_p=0.3, u=u) for u in us[::50]}
    assert both <= set(order[:5].tolist()) and order[0] in both
    # ties at the k-th value are kept
    y = np.array([3.0, 1.0, 3.0, 2.0, 3.0])
    assert {R.sample_logits(y, top_k=2, u=u) for u in us[::50]} == {0, 2, 4}
