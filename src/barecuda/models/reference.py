"""A float64 numpy reference of the Llama architecture on a GGUF file's dequantized weights.

The correctness reference of ``barecuda.models.llama`` (and numpy dequantizers of the
GGUF block formats, checked in the tests against ``gguf.quants.dequantize``). Written
for clarity, not speed: weights are kept as float32 (the exact dequantized values, as
ggml computes them in float32) and every product and sum is taken in float64.

Conventions that matter (llama.cpp's, which the GGUF file follows):

- ``convert_hf_to_gguf.py`` permutes the rows of ``attn_q``/``attn_k`` of llama models so
  that RoPE rotates *adjacent* pairs ``(x[2i], x[2i+1])`` (ggml's "normal" rope), not the
  two halves of HF's rotate_half. Applied to the file's weights, the adjacent-pair
  rotation below gives HF's model exactly.
- llama3 frequency scaling is stored as a tensor ``rope_freqs.weight`` (one factor per
  frequency; theta_i = pos * base^(-2i/n_rot) / factor_i); linear scaling as
  ``llama.rope.scaling.type = "linear"`` with ``llama.rope.scaling.factor``.
- No ``output.weight``: the output projection is tied to ``token_embd.weight``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from barecuda.models.gguf import GGUFError, GGUFFile, TensorInfo, open_gguf

__all__ = ["dequantize", "LlamaConfig", "ReferenceLlama", "softmax", "sample_logits"]

_F16 = np.dtype("<f2")


# -- dequantizers ---------------------------------------------------------------------------

def _blocks(raw: Any, nbytes_block: int) -> np.ndarray:
    a = np.frombuffer(raw, dtype=np.uint8)
    if a.size % nbytes_block:
        raise GGUFError(f"{a.size} bytes is not a whole number of {nbytes_block}-byte blocks")
    return a.reshape(-1, nbytes_block)


def _f16(b: np.ndarray) -> np.ndarray:
    """Columns of a (n, 2) uint8 array read as float16 -> float32 (n, 1)."""
    return np.ascontiguousarray(b).view(_F16).astype(np.float32)


def _q8_0(raw: Any) -> np.ndarray:
    b = _blocks(raw, 34)
    d = _f16(b[:, 0:2])
    q = b[:, 2:].view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)


def _q4_0(raw: Any) -> np.ndarray:
    b = _blocks(raw, 18)
    d = _f16(b[:, 0:2])
    qs = b[:, 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    return (d * q).reshape(-1)


def _q4_1(raw: Any) -> np.ndarray:
    b = _blocks(raw, 20)
    d = _f16(b[:, 0:2])
    m = _f16(b[:, 2:4])
    qs = b[:, 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return (d * q + m).reshape(-1)


def _q4_k_scales(s: np.ndarray) -> tuple:
    """ggml's get_scale_min_k4 for j = 0..7 over (n, 12) packed 6-bit scales -> (sc, m), each (n, 8)."""
    s = s.astype(np.uint8)
    sc = np.empty((s.shape[0], 8), np.uint8)
    mn = np.empty((s.shape[0], 8), np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def _q4_k(raw: Any) -> np.ndarray:
    b = _blocks(raw, 144)
    d = _f16(b[:, 0:2])
    dmin = _f16(b[:, 2:4])
    sc, mn = _q4_k_scales(b[:, 4:16])
    qs = b[:, 16:].reshape(-1, 4, 32)                       # 4 chunks of 64 values
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).astype(np.float32)   # (n, 4, 2, 32): sub-block 2j, 2j+1
    scale = (d * sc).reshape(-1, 4, 2, 1)
    minv = (dmin * mn).reshape(-1, 4, 2, 1)
    return (scale * q - minv).reshape(-1)


def _q6_k(raw: Any) -> np.ndarray:
    b = _blocks(raw, 210)
    ql = b[:, 0:128].reshape(-1, 2, 64)
    qh = b[:, 128:192].reshape(-1, 2, 32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(-1, 2, 8)
    d = _f16(b[:, 208:210]).reshape(-1, 1, 1)
    q1 = (ql[:, :, :32] & 0x0F) | (((qh >> 0) & 3) << 4)
    q2 = (ql[:, :, 32:] & 0x0F) | (((qh >> 2) & 3) << 4)
    q3 = (ql[:, :, :32] >> 4) | (((qh >> 4) & 3) << 4)
    q4 = (ql[:, :, 32:] >> 4) | (((qh >> 6) & 3) << 4)
    q = np.stack([q1, q2, q3, q4], axis=2).astype(np.float32) - 32.0     # (n, 2, 4, 32)
    # value l + 32k of half n uses scale sc[n][l // 16 + 2k]
    s = sc.reshape(-1, 2, 4, 2, 1)                                          # [.., k, l//16]
    q = q.reshape(-1, 2, 4, 2, 16)
    return (d.reshape(-1, 1, 1, 1, 1) * s * q).reshape(-1)


def _bf16(raw: Any) -> np.ndarray:
    u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return u.view(np.float32)


_DEQUANT = {
    "F32": lambda raw: np.frombuffer(raw, dtype="<f4").copy(),
    "F16": lambda raw: np.frombuffer(raw, dtype=_F16).astype(np.float32),
    "BF16": _bf16,
    "Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q4_K": _q4_k, "Q6_K": _q6_k,
}


def dequantize(raw: Any, type_name: str, shape: Optional[Sequence[int]] = None) -> np.ndarray:
    """Dequantize GGUF bytes of ``type_name`` to float32 (shape: numpy order, optional)."""
    try:
        fn = _DEQUANT[type_name]
    except KeyError:
        raise GGUFError(f"no dequantizer for type {type_name}") from None
    out = fn(raw)
    return out.reshape(tuple(shape)) if shape is not None else out


def dequantize_tensor(t: TensorInfo) -> np.ndarray:
    t.check_supported()
    return dequantize(t.data, t.type_name, t.shape)


# -- model ----------------------------------------------------------------------------------

@dataclass
class LlamaConfig:
    """Hyper-parameters of a Llama-architecture GGUF file (``<arch>.*`` keys)."""
    arch: str
    n_layer: int
    dim: int
    ffn_dim: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    vocab: int
    eps: float
    rope_base: float
    rope_linear_factor: float
    context_length: int
    tied_output: bool
    has_rope_freqs: bool

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> "LlamaConfig":
        arch = f.architecture
        if arch not in ("llama",):
            raise GGUFError(f"{f.path}: architecture {arch!r} is not a Llama-architecture model "
                            "(general.architecture must be 'llama')")
        a = arch + "."
        dim = int(f[a + "embedding_length"])
        n_head = int(f[a + "attention.head_count"])
        n_head_kv = int(f.get(a + "attention.head_count_kv", n_head))
        head_dim = int(f.get(a + "attention.key_length", dim // n_head))
        emb = f.tensor("token_embd.weight")
        vocab = int(f.get(a + "vocab_size", emb.dims[1] if len(emb.dims) > 1 else 0))
        scaling = f.get(a + "rope.scaling.type", "none")
        factor = 1.0
        if scaling == "linear":
            factor = float(f.get(a + "rope.scaling.factor", 1.0))
        elif scaling not in ("none", None, "llama3"):
            raise GGUFError(f"{f.path}: rope scaling {scaling!r} is not supported (none, linear, llama3)")
        return cls(
            arch=arch, n_layer=int(f[a + "block_count"]), dim=dim,
            ffn_dim=int(f[a + "feed_forward_length"]), n_head=n_head, n_head_kv=n_head_kv,
            head_dim=head_dim, n_rot=int(f.get(a + "rope.dimension_count", head_dim)), vocab=vocab,
            eps=float(f.get(a + "attention.layer_norm_rms_epsilon", 1e-5)),
            rope_base=float(f.get(a + "rope.freq_base", 10000.0)), rope_linear_factor=factor,
            context_length=int(f.get(a + "context_length", 2048)),
            tied_output="output.weight" not in f.tensors,
            has_rope_freqs="rope_freqs.weight" in f.tensors,
        )

    def tensor_names(self) -> List[str]:
        """Every tensor the model reads, in the order the GPU decoder stores them."""
        names = ["token_embd.weight", "output_norm.weight"]
        if not self.tied_output:
            names.append("output.weight")
        if self.has_rope_freqs:
            names.append("rope_freqs.weight")
        for i in range(self.n_layer):
            names += [f"blk.{i}.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                       "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")]
        return names

    def check(self, f: GGUFFile) -> None:
        """Every tensor present, supported and of the expected shape (GGUFError naming it)."""
        d, hd = self.dim, self.head_dim
        want = {"token_embd.weight": (self.vocab, d), "output_norm.weight": (d,), "output.weight": (self.vocab, d),
                "rope_freqs.weight": (self.n_rot // 2,)}
        per = {"attn_norm": (d,), "attn_q": (self.n_head * hd, d), "attn_k": (self.n_head_kv * hd, d),
               "attn_v": (self.n_head_kv * hd, d), "attn_output": (d, self.n_head * hd), "ffn_norm": (d,),
               "ffn_gate": (self.ffn_dim, d), "ffn_up": (self.ffn_dim, d), "ffn_down": (d, self.ffn_dim)}
        for name in self.tensor_names():
            t = f.tensor(name)
            t.check_supported()
            key = name.split(".")[2] if name.startswith("blk.") else None
            exp = per[key] if key else want[name]
            if tuple(t.shape) != exp:
                raise GGUFError(f"{f.path}: tensor {name!r} has shape {t.shape}, expected {exp}")
        if self.n_head % self.n_head_kv:
            raise GGUFError(f"{f.path}: head_count {self.n_head} is not a multiple of head_count_kv {self.n_head_kv}")
        if self.n_rot % 2 or self.n_rot > hd:
            raise GGUFError(f"{f.path}: rope.dimension_count {self.n_rot} does not fit head dim {hd}")


def llama3_factors(n_rot: int, base: float, factor: float, low_freq_factor: float = 1.0,
                   high_freq_factor: float = 4.0, original_context: int = 8192) -> np.ndarray:
    """The divisors of the inverse frequencies under llama3 scaling (HF's
    _compute_llama3_parameters), as llama.cpp's converter stores them in rope_freqs.weight."""
    inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = original_context / low_freq_factor, original_context / high_freq_factor
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    new = np.where(wavelen < high_wl, inv, np.where(wavelen > low_wl, inv / factor,
                                                      (1 - smooth) * inv / factor + smooth * inv))
    return inv / new


def llama3_params(cfg: "LlamaConfig", f: GGUFFile) -> Optional[dict]:
    """The llama3 scaling parameters that reproduce the file's rope_freqs.weight (factor =
    its largest entry; low/high 1/4 and the original context from the file or 8192, as in
    Llama 3.1-3.3), or None without the tensor. GGUFError when no such parameters fit."""
    if not cfg.has_rope_freqs:
        return None
    got = dequantize_tensor(f.tensor("rope_freqs.weight")).astype(np.float64)
    a = cfg.arch + "."
    params: Dict[str, Any] = dict(factor=float(got.max()), low_freq_factor=float(f.get(a + "rope.scaling.low_freq_factor", 1.0)),
                  high_freq_factor=float(f.get(a + "rope.scaling.high_freq_factor", 4.0)),
                  original_context=int(f.get(a + "rope.scaling.original_context_length", 8192)))
    want = llama3_factors(cfg.n_rot, cfg.rope_base, **params)
    if np.max(np.abs(want - got) / want) > 1e-4:
        raise GGUFError(f"{f.path}: rope_freqs.weight is not llama3 scaling with {params} "
                        "(the GPU rope computes llama3 factors from parameters)")
    return params


def rope_inv_freq(cfg: LlamaConfig, f: Optional[GGUFFile] = None) -> np.ndarray:
    """theta_i / pos for the n_rot/2 rotated pairs (float64), llama3 factors applied."""
    i = np.arange(cfg.n_rot // 2, dtype=np.float64)
    inv = cfg.rope_base ** (-2.0 * i / cfg.n_rot) / cfg.rope_linear_factor
    if cfg.has_rope_freqs and f is not None:
        inv = inv / dequantize_tensor(f.tensor("rope_freqs.weight")).astype(np.float64)
    return inv


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def sample_logits(logits: np.ndarray, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                  u: float = 0.5) -> int:
    """The token a top-k/top-p sampler picks from ``logits`` for a uniform number ``u`` in
    [0, 1) (the definition the tests hold barecuda.kernels.sample's statistics to):

    temperature; top-k keeps every token whose logit is >= the k-th largest (ties kept);
    top-p keeps the tokens at or above the largest logit threshold whose kept mass is at
    least ``top_p`` of the top-k mass; then the inverse CDF at ``u`` over the kept tokens
    in token-id order. ``temperature <= 0`` is greedy (ties: the lower id).
    """
    x = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(x))
    keep = np.ones(x.size, bool)
    if top_k and 0 < top_k < x.size:
        keep = x >= np.sort(x)[-top_k]
    w = np.exp((x - x.max()) / temperature)
    if top_p < 1.0:
        want = top_p * w[keep].sum()
        for t in np.unique(x[keep])[::-1]:
            if w[keep & (x >= t)].sum() >= want:
                keep &= x >= t
                break
    cw = np.cumsum(np.where(keep, w, 0.0))
    j = int(np.searchsorted(cw, u * cw[-1], side="right"))
    if j >= x.size or not keep[j]:
        j = int(np.nonzero(keep)[0][-1]) if j >= x.size else j
    return j


class ReferenceLlama:
    """The float64 reference model. ``forward(tokens)`` appends to the KV cache and returns
    the logits (float64) of every new position.

    Parameters
    ----------
    source : GGUFFile or path
    max_seq : int
        KV cache length (default 512).
    """

    def __init__(self, source: Any, max_seq: int = 512) -> None:
        f = source if isinstance(source, GGUFFile) else open_gguf(source)
        self.file = f
        cfg = LlamaConfig.from_gguf(f)
        cfg.check(f)
        self.cfg = cfg
        self.max_seq = max_seq
        w = lambda n: dequantize_tensor(f.tensor(n))
        self.tok_embd = w("token_embd.weight")
        self.out_norm = w("output_norm.weight").astype(np.float64)
        self.output = self.tok_embd if cfg.tied_output else w("output.weight")
        self.layers: List[Dict[str, np.ndarray]] = []
        for i in range(cfg.n_layer):
            p = f"blk.{i}."
            L = {k: w(p + k + ".weight") for k in ("attn_q", "attn_k", "attn_v", "attn_output",
                                                     "ffn_gate", "ffn_up", "ffn_down")}
            L["attn_norm"] = w(p + "attn_norm.weight").astype(np.float64)
            L["ffn_norm"] = w(p + "ffn_norm.weight").astype(np.float64)
            self.layers.append(L)
        self.inv_freq = rope_inv_freq(cfg, f)
        self.reset()

    def reset(self) -> None:
        c = self.cfg
        self.k_cache = np.zeros((c.n_layer, self.max_seq, c.n_head_kv, c.head_dim))
        self.v_cache = np.zeros_like(self.k_cache)
        self.pos = 0

    def rmsnorm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * w

    def rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Adjacent-pair rotation of the first n_rot dims of x (T, heads, head_dim) at positions pos (T,)."""
        n = self.cfg.n_rot
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]       # (T, n/2)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        x0, x1 = x[..., 0:n:2], x[..., 1:n:2]
        out[..., 0:n:2] = x0 * cos - x1 * sin
        out[..., 1:n:2] = x0 * sin + x1 * cos
        return out

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        c = self.cfg
        toks = np.asarray(tokens, dtype=np.int64)
        T = toks.size
        if self.pos + T > self.max_seq:
            raise ValueError(f"the KV cache holds {self.max_seq} positions; {self.pos} used, {T} more asked")
        pos = np.arange(self.pos, self.pos + T)
        x = self.tok_embd[toks].astype(np.float64)
        group = c.n_head // c.n_head_kv
        scale = 1.0 / math.sqrt(c.head_dim)
        S = self.pos + T
        mask = np.where(np.arange(S)[None, :] <= pos[:, None], 0.0, -np.inf)   # (T, S) causal
        for li, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["attn_norm"])
            q = (h @ L["attn_q"].T.astype(np.float64)).reshape(T, c.n_head, c.head_dim)
            k = (h @ L["attn_k"].T.astype(np.float64)).reshape(T, c.n_head_kv, c.head_dim)
            v = (h @ L["attn_v"].T.astype(np.float64)).reshape(T, c.n_head_kv, c.head_dim)
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.k_cache[li, self.pos:S] = k
            self.v_cache[li, self.pos:S] = v
            K = np.repeat(self.k_cache[li, :S], group, axis=1)     # (S, n_head, hd)
            V = np.repeat(self.v_cache[li, :S], group, axis=1)
            att = np.einsum("thd,shd->hts", q, K) * scale + mask[None]
            att = softmax(att, axis=-1)
            o = np.einsum("hts,shd->thd", att, V).reshape(T, c.n_head * c.head_dim)
            x = x + o @ L["attn_output"].T.astype(np.float64)
            h = self.rmsnorm(x, L["ffn_norm"])
            g = h @ L["ffn_gate"].T.astype(np.float64)
            u = h @ L["ffn_up"].T.astype(np.float64)
            x = x + (g / (1.0 + np.exp(-g)) * u) @ L["ffn_down"].T.astype(np.float64)
        self.pos = S
        h = self.rmsnorm(x, self.out_norm)
        return h @ self.output.T.astype(np.float64)

    def generate(self, prompt: Sequence[int], n: int, *, stop: Sequence[int] = ()) -> List[int]:
        """Greedy: ``n`` tokens after ``prompt`` (from the current cache state), stopping after a token in ``stop``."""
        out: List[int] = []
        logits = self.forward(prompt)[-1]
        for _ in range(n):
            t = int(np.argmax(logits))
            out.append(t)
            if t in stop or self.pos >= self.max_seq:
                break
            logits = self.forward([t])[-1]
        return out
