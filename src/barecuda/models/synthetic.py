"""Random-weight Llama GGUF files (tests and benchmarks), written with ``gguf.GGUFWriter``.

Needs numpy and the ``gguf`` package (``pip install ".[models]"`` from a barecuda checkout). Weights are
random with a sane scale (std ~ 1/sqrt(fan-in)) so that the logits are well
conditioned. F32/F16/BF16/Q8_0/Q4_0/Q4_1 tensors are quantized from random floats with
``gguf.quants.quantize``; Q4_K and Q6_K blocks are filled directly (any bytes with sane
``d``/``dmin`` are a valid block), which is how a "Q4_K_M" file (Q4_K, with Q6_K for
``attn_v``/``ffn_down``/``output``, as llama.cpp's Q4_K_M mix does) is made here.
"""
from __future__ import annotations

import os
from typing import Any, Optional

__all__ = ["write_random_llama", "random_blocks", "SHAPES"]

#: The shapes of issue 25's benchmark (vocabulary 32000, untied output).
SHAPES = {
    "tiny": dict(n_layer=2, dim=256, ffn_dim=512, n_head=4, n_head_kv=2, vocab=512),
    # SmolLM2-135M's shape (its file: Q4_1, Q8_0 embedding, tied output, rope base 100000)
    "smollm2": dict(n_layer=30, dim=576, ffn_dim=1536, n_head=9, n_head_kv=3, vocab=49152),
    "1b": dict(n_layer=16, dim=2048, ffn_dim=8192, n_head=32, n_head_kv=8, vocab=32000),
    "8b": dict(n_layer=32, dim=4096, ffn_dim=14336, n_head=32, n_head_kv=8, vocab=32000),
}


class _Pool:
    """Random values cut from one pool at random offsets (``fast=True``): a 14 GB file in
    seconds instead of minutes of random-number generation. A tensor no larger than the
    pool (2^27 + 7 values: every tensor of the 1B and 8B shapes) is a view of it at its own
    random offset, so nothing is copied until the writer writes it; a larger one repeats
    the pool cyclically (whose length is coprime to the row lengths used, so neighbouring
    rows still differ)."""

    def __init__(self, rng: Any, n: int = (1 << 27) + 7) -> None:
        self.rng, self.n = rng, n
        self._normal: Any = None
        self._bytes: Any = None
        self._scaled: dict = {}

    @property
    def normal(self) -> Any:
        if self._normal is None:          # made on first use: a Q4_K_M file needs only bytes
            self._normal = self.rng.standard_normal(self.n, dtype="float32")
        return self._normal

    @property
    def bytes(self) -> Any:
        if self._bytes is None:
            self._bytes = self.rng.integers(0, 256, size=self.n, dtype="uint8")
        return self._bytes

    def take(self, src: Any, count: int, copy: bool = False) -> Any:
        """``count`` values of ``src`` from a random offset: a read-only view when they fit
        (``copy=True`` for a writable array), else read cyclically into a new array."""
        import numpy as np
        if count <= self.n:
            off = int(self.rng.integers(0, self.n - count + 1))
            v = src[off:off + count]
            if copy:
                return v.copy()
            v = v.view()
            v.flags.writeable = False
            return v
        off = int(self.rng.integers(0, self.n))
        out = np.empty(count, src.dtype)
        first = self.n - off
        out[:first] = src[off:]
        pos = first
        while pos < count:
            k = min(self.n, count - pos)
            out[pos:pos + k] = src[:k]
            pos += k
        return out

    def normal_scaled(self, scale: float, dtype: str) -> Any:
        """The pool's normal values times ``scale``, rounded once to ``dtype`` (cached)."""
        key = (scale, dtype)
        if key not in self._scaled:
            self._scaled[key] = (self.normal * scale).astype(dtype)
        return self._scaled[key]


def random_blocks(rng: Any, qtype: str, n_out: int, n_in: int, scale: float, pool: Optional[_Pool] = None) -> Any:
    """Random Q4_K or Q6_K blocks for an ``n_out x n_in`` matrix: uint8 (n_out, n_in // 256 * size)."""
    import numpy as np
    nb = n_in // 256

    def raw(size: int) -> Any:
        if pool is None:
            return rng.integers(0, 256, size=(n_out, nb, size), dtype=np.uint8)
        return pool.take(pool.bytes, n_out * nb * size, copy=True).reshape(n_out, nb, size)
    if qtype == "Q4_K":
        b = raw(144)
        # value = d*sc*q - dmin*m, sc, m in 0..63, q in 0..15: centre it on zero on average
        d = (rng.uniform(0.5, 1.5, size=(n_out, nb)) * scale / (32 * 7.5)).astype("<f2")
        dmin = (rng.uniform(0.5, 1.5, size=(n_out, nb)) * scale / 32).astype("<f2")
        b[:, :, 0:2] = d.view(np.uint8).reshape(n_out, nb, 2)
        b[:, :, 2:4] = dmin.view(np.uint8).reshape(n_out, nb, 2)
        return b.reshape(n_out, nb * 144)
    if qtype == "Q6_K":
        b = raw(210)
        sc = rng.integers(1, 64, size=(n_out, nb, 16)).astype(np.int8)
        b[:, :, 192:208] = sc.view(np.uint8)
        d = (rng.uniform(0.5, 1.5, size=(n_out, nb)) * scale / (32 * 18)).astype("<f2")
        b[:, :, 208:210] = d.view(np.uint8).reshape(n_out, nb, 2)
        return b.reshape(n_out, nb * 210)
    raise ValueError(f"random_blocks: {qtype}")


def write_random_llama(path: str, *, n_layer: int, dim: int, ffn_dim: int, n_head: int, n_head_kv: int,
                       vocab: int, qtype: str = "F16", tied: bool = False, seed: int = 0,
                       rope_base: float = 10000.0, llama3_rope: bool = False, context_length: int = 4096,
                       head_dim: Optional[int] = None, q4_k_m: bool = False, emb_qtype: Optional[str] = None,
                       fast: bool = False, no_vocab: bool = False) -> str:
    """Write a random-weight Llama GGUF to ``path`` and return it.

    ``qtype`` is the type of every 2-D weight (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K);
    norms are F32; ``emb_qtype`` overrides the embedding's type (SmolLM2's file: Q4_1 with a
    Q8_0 embedding, tied). ``q4_k_m=True`` writes llama.cpp's Q4_K_M mix (Q4_K; Q6_K for attn_v,
    ffn_down and the output). ``llama3_rope`` adds a ``rope_freqs.weight`` tensor (Llama 3.1's scaling:
    factor 8, low/high 1/4, original context 8192). ``fast=True`` cuts the random values
    from one pool at random offsets (benchmark-size files in seconds; F32/F16/BF16/Q4_K/Q6_K).
    ``no_vocab=True`` writes ``tokenizer.ggml.model = "none"`` (llama.cpp's marker for a file
    without a vocabulary, which its llama-bench then loads).
    """
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as QT
    rng = np.random.default_rng(seed)
    hd_ = head_dim or dim // n_head
    biggest = max(vocab * dim, ffn_dim * dim, n_head * hd_ * dim)     # values in the largest matrix
    pool = _Pool(rng, min(biggest, 1 << 27) + 7) if fast else None
    hd = head_dim or dim // n_head
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(n_layer)
    w.add_context_length(context_length)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn_dim)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    if no_vocab:        # llama.cpp loads a file without a tokenizer only when it says so (llama-bench)
        w.add_tokenizer_model("none")
    if head_dim:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if q4_k_m:
        qtype = "Q4_K"

    def mat(name: str, n_out: int, n_in: int, t: str) -> None:
        scale = 1.0 / np.sqrt(n_in)
        if t in ("Q4_K", "Q6_K"):
            w.add_tensor(name, random_blocks(rng, t, n_out, n_in, scale, pool), raw_dtype=getattr(QT, t))
            return
        if pool is not None and t == "F16":
            w.add_tensor(name, pool.take(pool.normal_scaled(scale, "float16"), n_out * n_in).reshape(n_out, n_in))
            return
        if pool is not None and t in ("BF16", "F32"):
            x = pool.take(pool.normal_scaled(scale, "float32"), n_out * n_in).reshape(n_out, n_in)
        else:
            x = (rng.standard_normal((n_out, n_in), dtype=np.float32) * scale).astype(np.float32)
        if t == "F32":
            w.add_tensor(name, x)
        elif t == "F16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, getattr(QT, t))
            w.add_tensor(name, q, raw_dtype=getattr(QT, t))

    def vec(name: str, n: int, mean: float = 1.0) -> None:
        w.add_tensor(name, (mean + 0.1 * rng.standard_normal(n)).astype(np.float32))

    big = "Q6_K" if q4_k_m else qtype
    emb_t = emb_qtype or (qtype if qtype not in ("Q4_K", "Q6_K") or dim % 256 == 0 else "F16")
    # The embedding of llama.cpp's Q4_K_M is Q4_K too; keep gathers simple elsewhere.
    mat("token_embd.weight", vocab, dim, emb_t)
    vec("output_norm.weight", dim)
    if not tied:
        mat("output.weight", vocab, dim, big)
    if llama3_rope:     # Llama 3.1's parameters, stored as llama.cpp's converter does
        from barecuda.models.reference import llama3_factors
        w.add_tensor("rope_freqs.weight", llama3_factors(hd, rope_base, 8.0).astype(np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", dim)
        mat(p + "attn_q.weight", n_head * hd, dim, qtype)
        mat(p + "attn_k.weight", n_head_kv * hd, dim, qtype)
        mat(p + "attn_v.weight", n_head_kv * hd, dim, big)
        mat(p + "attn_output.weight", dim, n_head * hd, qtype)
        vec(p + "ffn_norm.weight", dim)
        mat(p + "ffn_gate.weight", ffn_dim, dim, qtype)
        mat(p + "ffn_up.weight", ffn_dim, dim, qtype)
        mat(p + "ffn_down.weight", dim, ffn_dim, big)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    return os.fspath(path)
