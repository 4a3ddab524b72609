"""The GPU decoder of Llama-architecture GGUF models: one CUDA graph launch per token.

Built only on barecuda and its built-in kernels (``barecuda.kernels``): no torch.

The decode graph (built once, replayed unchanged for every token)::

    embedding(table, state.tok)                      -> x
    per layer:
      rmsnorm(x, attn_norm)                          -> h
      matvec(Wqkv, h)                                -> qkv     (Q, K, V stored back to back: one weight;
                                                                 two matvecs where V has another type, as in Q4_K_M)
      rope(q, k, pos=state.pos, layout="llama")      in place   (GGUF's permuted Q/K rows: adjacent pairs)
      kv_append(k, v, cache, pos=state.pos)
      attention_decode(q, cache, length=state.pos, len_offset=1)  -> o
      matvec(Wo, o, residual=x)                      -> x       (residual add in the epilogue)
      rmsnorm(x, ffn_norm)                           -> h
      matvec_silu_mul(Wgate, Wup, h)                 -> a       (gate and up in one launch, SiLU*mul fused)
      matvec(Wdown, a, residual=x)                   -> x
    rmsnorm(x, output_norm)                          -> h
    matvec(Wout, h)                                  -> logits
    argmax(logits) or sample(logits, offset=state.pos) -> state.sampled
    advance(state)                                   pos += 1; tok = prompt[pos] or sampled

Everything that changes per token lives in device memory (``state``: the position, the
current token, the prompt length, the sampled token and the token history), so the
graph's arguments never change: the host's per-token work is one ``cuGraphLaunch``.
The same graph consumes the prompt (positions below the prompt length take the next
prompt token instead of the sampled one): the default prefill is the decode graph
replayed token by token. ``prefill_gemm`` (``generate_ids(..., prefill="gemm")``) runs the
prompt as batches through matmul (weights dequantized per layer into a scratch buffer)
and flash attention; it is checked on the driver double only so far.

Activations, KV cache and logits are float16 (or bfloat16; float32, the correctness mode,
runs the unfused loop); weights stay in their GGUF format (matvec dequantizes in
registers); norms are converted to the activation dtype.
"""
from __future__ import annotations

import argparse
import math
import os
import struct
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from barecuda.models.gguf import GGUFError, GGUFFile, open_gguf, plan_upload, upload

__all__ = ["Llama", "main"]

_DTYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
_STATE_HEAD = 4          # pos, tok, n_prompt, sampled; then the history

# llama_advance(int* state, u32 max_seq), hand-written PTX: JIT-compiled by the driver,
# so the decoder needs no NVRTC of its own.
#   p = min(state[0] + 1, max_seq); if p >= state[2]: state[4 + p] = state[3];
#   state[1] = state[4 + p]; state[0] = p
_ADVANCE_PTX = r"""
.version 7.0
.target sm_50
.address_size 64

.visible .entry llama_advance(
    .param .u64 state,
    .param .u32 max_seq
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [state];
    ld.param.u32 %r1, [max_seq];
    cvta.to.global.u64 %rd1, %rd1;
    ld.global.u32 %r2, [%rd1];
    add.s32 %r2, %r2, 1;
    min.s32 %r2, %r2, %r1;
    ld.global.u32 %r3, [%rd1+8];
    mul.wide.s32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    setp.lt.s32 %p1, %r2, %r3;
    @%p1 bra $L__fed;
    ld.global.u32 %r4, [%rd1+12];
    st.global.u32 [%rd3+16], %r4;
$L__fed:
    ld.global.u32 %r5, [%rd3+16];
    st.global.u32 [%rd1+4], %r5;
    st.global.u32 [%rd1], %r2;
    ret;
}
"""


def _f32_to(raw: Any, n: int, dtype: str) -> bytes:
    """F32 bytes -> float16/bfloat16 bytes (round to nearest even), without numpy."""
    if dtype == "float32":
        return bytes(raw)
    vals = struct.unpack(f"<{n}f", bytes(raw))
    if dtype == "float16":
        return struct.pack(f"<{n}e", *vals)
    out = bytearray(2 * n)
    for i, u in enumerate(struct.unpack(f"<{n}I", struct.pack(f"<{n}f", *vals))):
        r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 if (u & 0x7F800000) != 0x7F800000 else u >> 16
        out[2 * i:2 * i + 2] = struct.pack("<H", r & 0xFFFF)
    return bytes(out)


class _Sampling:
    __slots__ = ("temperature", "top_k", "top_p", "seed")

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> None:
        self.temperature, self.top_k, self.top_p, self.seed = float(temperature), int(top_k), float(top_p), int(seed)

    def key(self) -> Tuple[Any, ...]:
        if self.temperature <= 0:
            return ("greedy",)
        return (self.temperature, self.top_k, self.top_p, self.seed)


class Llama:
    """A Llama-architecture GGUF model on the GPU, decoded one graph launch per token.

    Parameters
    ----------
    path : str or GGUFFile
    max_seq : int, optional
        KV cache length (default: the model's context length, at most 4096).
    dtype : {"float16", "bfloat16", "float32"}
        Activations, KV cache and logits. float32 is the correctness mode: it runs the
        unfused loop (the fused matvecs are 16-bit) with a plain float32 decode attention,
        several times slower; weights stay in the file's format either way.
    device : Device or int, optional
    progress : bool, optional
        Progress bar for the weight upload (default: large files on a terminal).

    Every check (keys, tensors, types, shapes, rope scaling, kernel formats) runs before
    any GPU memory is taken.
    """

    def __init__(self, path: Any, *, max_seq: Optional[int] = None, dtype: str = "float16", device: Any = None,
                 progress: Optional[bool] = None, fused: bool = True, kv_layout: Optional[str] = None,
                 pdl: bool = False) -> None:
        from barecuda.models.reference import LlamaConfig
        if dtype not in _DTYPES:
            raise ValueError(f"dtype={dtype!r}: float16, bfloat16 or float32")
        self.fused = bool(fused) and dtype != "float32"
        self.pdl = bool(pdl) and self.fused
        self.kv_layout = kv_layout or ("head_major" if self.fused else "token_major")
        if self.kv_layout not in ("head_major", "token_major"):
            raise ValueError(f"kv_layout={kv_layout!r}: 'head_major' or 'token_major'")
        f = path if isinstance(path, GGUFFile) else open_gguf(path)
        cfg = LlamaConfig.from_gguf(f)
        cfg.check(f)
        self.file, self.cfg, self.dtype = f, cfg, dtype
        self.max_seq = int(max_seq or min(cfg.context_length, 4096))
        if cfg.head_dim not in (64, 80, 96, 128):
            raise GGUFError(f"{f.path}: head dim {cfg.head_dim}: attention_decode serves 64, 80, 96, 128")
        self.rope_scaling = None
        if cfg.has_rope_freqs:
            from barecuda.models.reference import llama3_params
            p = llama3_params(cfg, f)
            assert p is not None
            self.rope_scaling = {"rope_type": "llama3", "factor": p["factor"], "low_freq_factor": p["low_freq_factor"],
                                 "high_freq_factor": p["high_freq_factor"],
                                 "original_max_position_embeddings": p["original_context"]}
        if cfg.rope_linear_factor != 1.0:
            raise GGUFError(f"{f.path}: linear rope scaling is not supported by the GPU rope")
        layout = self._layout()
        plan_upload(f, layout)                      # every tensor checked; no memory yet
        import barecuda
        from barecuda import kernels as K
        from barecuda.kernels import _attention as KA, _dequant as KD, _fused as KF, _matvec as KM
        self._bc: Any = barecuda
        self._KF: Any = KF
        self._K: Any = K
        self._KA: Any = KA
        self._KD: Any = KD
        self._KM: Any = KM
        self.device = barecuda.Device(device) if device is not None else barecuda.Device()
        self.stream = barecuda.Stream(self.device)
        t0 = time.perf_counter()
        self.w = upload(f, layout, device=self.device, progress=progress)
        self.load_seconds = time.perf_counter() - t0
        self.weight_bytes = sum(f.tensor(n).nbytes for n in cfg.tensor_names()
                                if n != "token_embd.weight" or cfg.tied_output)
        self._alloc()
        self._graphs: Dict[Tuple[Any, ...], Any] = {}
        self._advance_module = barecuda.Module.from_ptx(_ADVANCE_PTX, device=self.device)
        self._advance = self._advance_module.get_kernel("llama_advance")

    # -- setup -------------------------------------------------------------------------
    def _layout(self) -> List[Any]:
        c = self.cfg
        lay: List[Any] = ["token_embd.weight", "output_norm.weight"]
        if not c.tied_output:
            lay.append("output.weight")
        for i in range(c.n_layer):
            p = f"blk.{i}."
            lay += [p + "attn_norm.weight"] + [(p + key, names) for key, names in self._qkv_groups(i)] + [
                    p + "attn_output.weight", p + "ffn_norm.weight", p + "ffn_gate.weight", p + "ffn_up.weight",
                    p + "ffn_down.weight"]
        return lay

    def _qkv_groups(self, i: int) -> List[Tuple[str, List[str]]]:
        """Q, K, V stored back to back as one matrix when they share a type (one matvec);
        a mix (llama.cpp's Q4_K_M gives attn_v more bits) splits where the type changes."""
        names = [f"blk.{i}.attn_{x}.weight" for x in "qkv"]
        types = [self.file.tensor(n).type for n in names]
        groups: List[Tuple[str, List[str]]] = []
        for x, n, t in zip("qkv", names, types):
            if groups and self.file.tensor(groups[-1][1][-1]).type == t:
                groups[-1] = (groups[-1][0] + x, groups[-1][1] + [n])
            else:
                groups.append((x, [n]))
        return groups

    def _qw(self, key: str, name: str, rows: Optional[int] = None) -> Any:
        t = self.file.tensor(name)
        n, k = t.shape
        return self._KD.QuantWeight(self.w[key], t.type, (rows or n, k))

    def _norm(self, name: str) -> Any:
        t = self.file.tensor(name)
        n = t.n_elements
        b = self._bc.empty((n,), self.dtype, device=self.device)
        if t.type_name == "F32":
            b.copy_from(_f32_to(t.data, n, self.dtype))
        else:
            raise GGUFError(f"{self.file.path}: norm {name!r} is {t.type_name}; F32 expected")
        return b

    def _qkv_parts(self, i: int) -> List[Tuple[Any, int, int]]:
        """[(weight, first row, rows)] of layer i's Q/K/V matvecs (usually one)."""
        parts, row = [], 0
        for key, names in self._qkv_groups(i):
            rows = sum(self.file.tensor(n).shape[0] for n in names)
            parts.append((self._qw(f"blk.{i}.{key}", names[0], rows), row, rows))
            row += rows
        return parts

    def _alloc(self) -> None:
        bc, c, dt = self._bc, self.cfg, self.dtype
        hd = c.head_dim
        self.nq, self.nkv = c.n_head * hd, c.n_head_kv * hd
        # embedding table in the activation dtype
        t = self.file.tensor("token_embd.weight")
        if (t.type_name, dt) in (("F16", "float16"), ("BF16", "bfloat16"), ("F32", "float32")):
            self.table = self.w["token_embd.weight"].view(dt, (c.vocab, c.dim))
        elif t.type_name in ("F16", "BF16", "F32"):
            from barecuda.models.reference import dequantize_tensor
            import numpy as np
            host = dequantize_tensor(t)
            if dt in ("float16", "float32"):
                data = host.astype(dt).tobytes()
            else:
                data = _f32_to(host.astype(np.float32).tobytes(), host.size, dt)
            self.table = bc.empty((c.vocab, c.dim), dt, device=self.device).copy_from(data)
        else:
            self.table = self._KD.dequantize(self._qw("token_embd.weight", "token_embd.weight"), dtype=dt)
        self.out_w = self._qw("token_embd.weight" if c.tied_output else "output.weight",
                              "token_embd.weight" if c.tied_output else "output.weight")
        self.out_norm = self._norm("output_norm.weight")
        self.layers = []
        cache_shape = ((self.max_seq, c.n_head_kv, hd) if self.kv_layout == "token_major"
                       else (c.n_head_kv, self.max_seq, hd))
        for i in range(c.n_layer):
            p = f"blk.{i}."
            self.layers.append(dict(
                attn_norm=self._norm(p + "attn_norm.weight"), ffn_norm=self._norm(p + "ffn_norm.weight"),
                qkv=self._qkv_parts(i),
                wo=self._qw(p + "attn_output.weight", p + "attn_output.weight"),
                gate=self._qw(p + "ffn_gate.weight", p + "ffn_gate.weight"),
                up=self._qw(p + "ffn_up.weight", p + "ffn_up.weight"),
                down=self._qw(p + "ffn_down.weight", p + "ffn_down.weight"),
                k_cache=bc.zeros(cache_shape, dt, device=self.device),
                v_cache=bc.zeros(cache_shape, dt, device=self.device)))
        self.x = bc.zeros((c.dim,), dt, device=self.device)
        self.h = bc.zeros((c.dim,), dt, device=self.device)
        self.qkv = bc.zeros((self.nq + 2 * self.nkv,), dt, device=self.device)
        self.q = self.qkv[0:self.nq].view(dt, (c.n_head, hd))
        self.k = self.qkv[self.nq:self.nq + self.nkv].view(dt, (c.n_head_kv, hd))
        self.v = self.qkv[self.nq + self.nkv:].view(dt, (c.n_head_kv, hd))
        self.o = bc.zeros((c.n_head, hd), dt, device=self.device)
        self.o_flat = self.o.view(dt, (self.nq,))
        self.a = bc.zeros((c.ffn_dim,), dt, device=self.device)
        self.logits = bc.zeros((c.vocab,), dt, device=self.device)
        self.state = bc.zeros((_STATE_HEAD + self.max_seq + 1,), "int32", device=self.device)
        self.pos_ref = self.state[0:1]
        self.tok_ref = self.state[1:2]
        self.sampled_ref = self.state[3:4].view("int32", ())
        self.attn_ws = None
        # the fused loop's norm inputs: xg = x * g and the token's sums of squares
        # (ss[2i]: layer i's attention norm, ss[2i + 1]: its FFN norm, ss[2L]: the output norm)
        self.xg = bc.zeros((c.dim,), dt, device=self.device)
        self.ss = bc.zeros((2 * c.n_layer + 1,), "float32", device=self.device)
        from barecuda.models.reference import rope_inv_freq
        inv = [float(v) for v in rope_inv_freq(c, self.file)]
        self.inv_freq = bc.empty((max(len(inv), 1),), "float32", device=self.device)
        self.inv_freq.copy_from(struct.pack(f"<{max(len(inv), 1)}f", *(inv or [0.0])))

    # -- the graph ---------------------------------------------------------------------
    def _plans(self, sampling: _Sampling) -> List[Any]:
        """The launches of one token, in order, each a LaunchPlan bound to fixed buffers."""
        if self.fused:
            return self._plans_fused(sampling) + self._tail(sampling)
        K, KA, KM, c, s = self._K, self._KA, self._KM, self.cfg, self.stream
        eps = c.eps
        plans = [K.embedding.plan(self.table, self.tok_ref, out=self.x.view(self.dtype, (1, c.dim)), stream=s)]
        for L in self.layers:
            plans += [
                K.rmsnorm.plan(self.x, L["attn_norm"], eps, out=self.h, stream=s),
                *[KM.plan_matvec(w, self.h, out=self.qkv[r0:r0 + n], stream=s) for w, r0, n in L["qkv"]],
                K.rope.plan(self.q, self.k, pos=self.pos_ref, theta=c.rope_base, layout="llama",
                            rotary_dim=c.n_rot, scaling=self.rope_scaling, out=self.q, out_k=self.k, stream=s),
                KA.plan_kv_append(self.k, self.v, L["k_cache"], L["v_cache"], self.pos_ref,
                                  kv_layout=self.kv_layout, stream=s),
                KA.plan_attention_decode(self.q, L["k_cache"], L["v_cache"], self.pos_ref, out=self.o,
                                         scale=1.0 / math.sqrt(c.head_dim), len_offset=1,
                                         kv_layout=self.kv_layout, stream=s),
                KM.plan_matvec(L["wo"], self.o_flat, residual=self.x, out=self.x, stream=s),
                K.rmsnorm.plan(self.x, L["ffn_norm"], eps, out=self.h, stream=s),
                KM.plan_matvec_silu_mul(L["gate"], L["up"], self.h, out=self.a, stream=s),
                KM.plan_matvec(L["down"], self.a, residual=self.x, out=self.x, stream=s),
            ]
        plans += [K.rmsnorm.plan(self.x, self.out_norm, eps, out=self.h, stream=s),
                  KM.plan_matvec(self.out_w, self.h, out=self.logits, stream=s)]
        return plans + self._tail(sampling)

    def _plans_fused(self, sampling: _Sampling) -> List[Any]:
        """The fused token: embed_norm, then per layer qkv (RoPE + KV append in its
        epilogue), attention, wo (+ residual, next norm's inputs), glu, down (+ residual,
        next norm's inputs); the output head scaled by the final norm (csrc/fused.cu)."""
        KA, KF, c, s = self._KA, self._KF, self.cfg, self.stream
        eps, hd, dim = c.eps, c.head_dim, c.dim
        ss = [self.ss[i:i + 1] for i in range(2 * c.n_layer + 1)]
        plans = [KF.plan_embed_norm(self.table, self.tok_ref, x=self.x, xg=self.xg, g=self.layers[0]["attn_norm"],
                                    ss=self.ss, stream=s)]
        for i, L in enumerate(self.layers):
            g_next = self.layers[i + 1]["attn_norm"] if i + 1 < c.n_layer else self.out_norm
            plans += [KF.plan_fused_matvec("qkv", w, self.xg, out=self.qkv[r0:r0 + n], ss_in=ss[2 * i], dim=dim,
                                           eps=eps, k_cache=L["k_cache"], v_cache=L["v_cache"], pos=self.pos_ref,
                                           inv_freq=self.inv_freq if c.n_rot else None, row0=r0, nq=self.nq,
                                           nkv=self.nkv, head_dim=hd, n_rot=c.n_rot, kv_layout=self.kv_layout,
                                           pdl=self.pdl, stream=s)
                      for w, r0, n in L["qkv"]]
            plans += [
                KA.plan_attention_decode(self.q, L["k_cache"], L["v_cache"], self.pos_ref, out=self.o,
                                         scale=1.0 / math.sqrt(hd), len_offset=1, kv_layout=self.kv_layout,
                                         stream=s),
                KF.plan_fused_matvec("res", L["wo"], self.o_flat, out=self.x, ss_out=ss[2 * i + 1], xg=self.xg,
                                     g=L["ffn_norm"], pdl=self.pdl, stream=s),
                KF.plan_fused_matvec("glu", L["gate"], self.xg, up=L["up"], out=self.a, ss_in=ss[2 * i + 1],
                                     dim=dim, eps=eps, pdl=self.pdl, stream=s),
                KF.plan_fused_matvec("res", L["down"], self.a, out=self.x, ss_out=ss[2 * i + 2], xg=self.xg,
                                     g=g_next, pdl=self.pdl, stream=s),
            ]
        plans.append(KF.plan_fused_matvec("scale", self.out_w, self.xg, out=self.logits, ss_in=ss[2 * c.n_layer],
                                          dim=dim, eps=eps, pdl=self.pdl, stream=s))
        return plans

    def _tail(self, sampling: _Sampling) -> List[Any]:
        """argmax or sample into state.sampled, then advance the state."""
        K, s = self._K, self.stream
        plans: List[Any] = []
        if sampling.temperature <= 0:
            plans.append(K.argmax.plan(self.logits, out=self.sampled_ref, stream=s))
        else:
            plans.append(K.sample.plan(self.logits, temperature=sampling.temperature, top_k=sampling.top_k,
                                       top_p=sampling.top_p, seed=sampling.seed, offset=self.pos_ref,
                                       out=self.sampled_ref, stream=s))
        plans.append(self._advance.bind(1, 1, self.state, self.max_seq, stream=s))
        return plans

    def graph(self, sampling: Optional[_Sampling] = None) -> Any:
        """The executable decode graph for a sampling setting (built on first use, then cached)."""
        sampling = sampling or _Sampling()
        key = sampling.key()
        ge = self._graphs.get(key)
        if ge is None:
            plans = self._plans(sampling)
            if self.pdl:
                # programmatic edges come from capturing launches made with programmatic
                # stream serialization (the fused matvecs' plans); the rest are plain edges
                from barecuda.graph import capture
                self.stream.synchronize()
                with capture(self.stream) as g:
                    for p in plans:
                        p()
            else:
                g = self._bc.Graph(self.device)
                prev = None
                for p in plans:
                    prev = g.add_plan(p, depends_on=prev) if prev is not None else g.add_plan(p)
            g.keep_alive(plans)
            ge = g.instantiate()
            ge.upload(self.stream)
            self._graphs[key] = ge
            self.nodes_per_token = g.num_nodes()
            self._graph_objs = getattr(self, "_graph_objs", []) + [g]
        return ge

    @property
    def nodes_per_layer(self) -> int:
        """Graph nodes of a layer: fused, 5 when Q, K and V share a type (one QKV matvec), 6
        when V has its own (Q4_K_M); unfused, 9 and 10."""
        return (4 if self.fused else 8) + max(len(L["qkv"]) for L in self.layers)

    # -- running -----------------------------------------------------------------------
    def reset(self, prompt: Sequence[int]) -> None:
        """Put ``prompt`` into the device state: position 0, its first token current."""
        n = len(prompt)
        if not 1 <= n <= self.max_seq:
            raise ValueError(f"prompt of {n} tokens: 1..{self.max_seq} fit the KV cache")
        for t in prompt:
            if not 0 <= t < self.cfg.vocab:
                raise ValueError(f"token id {t} outside the vocabulary (0..{self.cfg.vocab - 1})")
        head = struct.pack(f"<{_STATE_HEAD + n}i", 0, prompt[0], n, 0, *prompt)
        self.stream.synchronize()
        self.state[0:_STATE_HEAD + n].copy_from(head)

    def _read_state(self, upto: int) -> List[int]:
        raw = self.state[0:upto].copy_to()
        return list(struct.unpack(f"<{upto}i", bytes(raw)))

    def step(self, n: int = 1, sampling: Optional[_Sampling] = None) -> None:
        """Launch the decode graph ``n`` times (asynchronously, on ``self.stream``)."""
        ge = self.graph(sampling)
        for _ in range(n):
            ge.launch(self.stream)

    def generate_ids(self, prompt: Sequence[int], max_new: int, *, temperature: float = 0.0, top_k: int = 0,
                     top_p: float = 1.0, seed: int = 0, stop: Sequence[int] = (), chunk: int = 16,
                     prefill: str = "graph") -> List[int]:
        """Token ids after ``prompt``: greedy (temperature 0) or sampled; stops after a ``stop`` id.

        ``prefill="graph"`` (default) feeds the prompt through the decode graph token by
        token; ``"gemm"`` runs all but the prompt's last token as a batch (``prefill_gemm``).
        """
        sampling = _Sampling(temperature, top_k, top_p, seed)
        P = len(prompt)
        max_new = min(max_new, self.max_seq - P + 1)
        if max_new <= 0:
            return []
        if prefill not in ("graph", "gemm"):
            raise ValueError(f"prefill={prefill!r}: 'graph' or 'gemm'")
        ge = self.graph(sampling)
        self.reset(prompt)
        if prefill == "gemm" and P > 1:
            self.prefill_gemm(prompt)
        else:
            for _ in range(P - 1):          # prefill: the same graph, fed from the prompt
                ge.launch(self.stream)
        out: List[int] = []
        stops = set(stop)
        while len(out) < max_new:
            n = min(chunk, max_new - len(out))
            for _ in range(n):
                ge.launch(self.stream)
            self.stream.synchronize()
            st = self._read_state(_STATE_HEAD + P + len(out) + n)
            new = st[_STATE_HEAD + P + len(out):]
            for t in new:
                out.append(t)
                if t in stops:
                    return out
        return out

    # -- batched prefill (GEMM + flash attention) ---------------------------------------
    def _dense(self, qw: Any, scratch: Any) -> Any:
        """The weight as a dense [N, K] array of the activation dtype: itself when it already
        is one, else dequantized into ``scratch`` (reused: valid until the next call)."""
        n, k = qw.shape
        if qw.dense:
            if qw.format != _DTYPES[self.dtype]:
                raise NotImplementedError(f"prefill_gemm: {qw.format} weights with {self.dtype} activations")
            return qw.data.view(self.dtype, (n, k))
        out = scratch[0:n * k].view(self.dtype, (n, k))
        return self._KD.dequantize(qw, dtype=self.dtype, out=out, stream=self.stream)

    def _prefill_buffers(self, T: int) -> Dict[str, Any]:
        pf = getattr(self, "_pf", None)
        if pf is not None and pf["T"] >= T:
            return pf
        bc, c, dt, d = self._bc, self.cfg, self.dtype, self.device
        wmax = max([qw.shape[0] * qw.shape[1] for L in self.layers for qw in
                    [w for w, _, _ in L["qkv"]] + [L["wo"], L["gate"], L["up"], L["down"]]])
        z = lambda *shape: bc.empty(shape, dt, device=d)
        self._pf = pf = dict(T=T, ids=bc.empty((T,), "int32", device=d), X=z(T, c.dim), H=z(T, c.dim),
                             Q=z(T, self.nq), K=z(T, self.nkv), V=z(T, self.nkv), O=z(T, self.nq),
                             G=z(T, c.ffn_dim), U=z(T, c.ffn_dim), A=z(T, c.ffn_dim), W=z(wmax))
        return pf

    def prefill_gemm(self, prompt: Sequence[int], chunk: int = 256) -> None:
        """Run ``prompt[:-1]`` as batches of up to ``chunk`` tokens (matmul with the weights
        dequantized per layer into a scratch buffer, flash attention, K/V copied into the
        cache), then leave the device state at the prompt's last token, as ``reset`` plus
        ``len(prompt) - 1`` graph launches would: the next graph launch gives its logits.

        Written against the kernels' documented contracts and checked on the driver double
        only; ``generate_ids`` defaults to the graph prefill (docs/inference.md).
        """
        K, KA = self._K, self._KA
        from barecuda.kernels import _matmul
        if self.kv_layout != "token_major":
            raise NotImplementedError("prefill_gemm writes a token-major KV cache: construct the model with "
                                      "kv_layout='token_major' (or use the graph prefill)")
        c, s, dt = self.cfg, self.stream, self.dtype
        if dt == "float32":
            raise NotImplementedError("prefill_gemm: flash attention is 16-bit; float32 uses the graph prefill")
        for L in self.layers:                   # before any launch
            for qw in [w for w, _, _ in L["qkv"]] + [L["wo"], L["gate"], L["up"], L["down"]]:
                if qw.dense and qw.format != _DTYPES[dt]:
                    raise NotImplementedError(f"prefill_gemm: {qw.format} weights with {dt} activations "
                                              "(use the graph prefill)")
        hd = c.head_dim
        P = len(prompt)
        n_total = P - 1
        pf = self._prefill_buffers(min(chunk, max(n_total, 1)))
        T = pf["T"]
        scale = 1.0 / math.sqrt(hd)
        for pos0 in range(0, n_total, T):
            n = min(T, n_total - pos0)
            ids = pf["ids"][0:n]
            self.stream.synchronize()
            ids.copy_from(struct.pack(f"<{n}i", *prompt[pos0:pos0 + n]))
            X, H = pf["X"][0:n], pf["H"][0:n]
            K.embedding(self.table, ids, out=X, stream=s)
            q = pf["Q"][0:n].view(dt, (n, c.n_head, hd))
            k = pf["K"][0:n].view(dt, (n, c.n_head_kv, hd))
            v = pf["V"][0:n].view(dt, (n, c.n_head_kv, hd))
            for L in self.layers:
                K.rmsnorm(X, L["attn_norm"], c.eps, out=H, stream=s)
                for qw, r0, rows in L["qkv"]:
                    W = self._dense(qw, pf["W"])
                    for name, lo, width, dst in (("q", 0, self.nq, pf["Q"]), ("k", self.nq, self.nkv, pf["K"]),
                                                 ("v", self.nq + self.nkv, self.nkv, pf["V"])):
                        if r0 <= lo and lo + width <= r0 + rows:
                            _matmul.matmul(H, W[lo - r0:lo - r0 + width], trans_b=True, out=dst[0:n], stream=s)
                K.rope(q, k, pos=pos0, theta=c.rope_base, layout="llama", rotary_dim=c.n_rot,
                       scaling=self.rope_scaling, out=q, out_k=k, stream=s)
                L["k_cache"][pos0:pos0 + n].copy_from(k, s)
                L["v_cache"][pos0:pos0 + n].copy_from(v, s)
                o = pf["O"][0:n].view(dt, (n, c.n_head, hd))
                KA.attention_prefill(q, L["k_cache"][0:pos0 + n], L["v_cache"][0:pos0 + n], causal=True,
                                     causal_offset=pos0, scale=scale, out=o, stream=s)
                _matmul.matmul(pf["O"][0:n], self._dense(L["wo"], pf["W"]), trans_b=True, beta=1.0, out=X,
                               stream=s)
                K.rmsnorm(X, L["ffn_norm"], c.eps, out=H, stream=s)
                _matmul.matmul(H, self._dense(L["gate"], pf["W"]), trans_b=True, out=pf["G"][0:n], stream=s)
                _matmul.matmul(H, self._dense(L["up"], pf["W"]), trans_b=True, out=pf["U"][0:n], stream=s)
                K.silu_mul(pf["G"][0:n], pf["U"][0:n], out=pf["A"][0:n], stream=s)
                _matmul.matmul(pf["A"][0:n], self._dense(L["down"], pf["W"]), trans_b=True, beta=1.0, out=X,
                               stream=s)
        # the state the graph prefill would have left: at the last prompt token
        self.stream.synchronize()
        head = struct.pack("<4i", P - 1, prompt[P - 1], P, 0)
        self.state[0:_STATE_HEAD].copy_from(head)

    def stream_ids(self, prompt: Sequence[int], max_new: int, **kw: Any) -> Iterator[int]:
        """Like ``generate_ids`` but yields each token as soon as it is known."""
        kw.setdefault("chunk", 1)
        yield from self.generate_ids(prompt, max_new, **kw)

    def prompt_logits(self, prompt: Sequence[int]) -> List[Any]:
        """Logits (numpy float32 arrays) at every position of ``prompt`` (greedy graph)."""
        import numpy as np
        ge = self.graph()
        self.reset(prompt)
        out = []
        for _ in prompt:
            ge.launch(self.stream)
            self.stream.synchronize()
            out.append(np.frombuffer(bytes(self.logits.copy_to()), dtype={"float16": np.float16, "float32": np.float32}
                                     .get(self.dtype, np.uint16)).copy())
        if self.dtype == "bfloat16":
            out = [(o.astype(np.uint32) << 16).view(np.float32) for o in out]
        return [o.astype(np.float32) for o in out]

    def bench(self, n_tokens: int = 128, repeats: int = 5, prompt: Sequence[int] = (1,)) -> Dict[str, Any]:
        """tg-style timing: ``n_tokens`` greedy steps after ``prompt``, median of ``repeats``."""
        ge = self.graph()
        times = []
        for _ in range(repeats + 1):
            self.reset(prompt)
            self.stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(n_tokens):
                ge.launch(self.stream)
            self.stream.synchronize()
            times.append(time.perf_counter() - t0)
        times = sorted(times[1:])
        med = times[len(times) // 2]
        tps = n_tokens / med
        return {"tokens": n_tokens, "seconds": med, "tok_s": tps, "weight_bytes": self.weight_bytes,
                "GB_s": self.weight_bytes * tps / 1e9, "nodes_per_token": self.nodes_per_token}

    def close(self) -> None:
        self.stream.synchronize()
        self._graphs.clear()


# -- command line ---------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m barecuda.models.llama",
                                 description="Run a Llama-architecture GGUF model on barecuda's kernels.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate text from a prompt")
    g.add_argument("--gguf", required=True)
    g.add_argument("--prompt", required=True)
    g.add_argument("--raw", action="store_true", help="do not apply the chat template")
    g.add_argument("--max-new", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-seq", type=int, default=None)
    g.add_argument("--dtype", default="float16", choices=sorted(_DTYPES))
    b = sub.add_parser("bench", help="tg128-style decode timing (greedy, from a one-token context)")
    b.add_argument("--gguf", required=True)
    b.add_argument("--tokens", type=int, default=128)
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--max-seq", type=int, default=512)
    b.add_argument("--dtype", default="float16", choices=sorted(_DTYPES))
    b.add_argument("--json", action="store_true")
    b.add_argument("--unfused", action="store_true", help="the 9-node loop (separate norm, rope, kv_append)")
    b.add_argument("--pdl", action="store_true", help="programmatic dependent launch between the fused matvecs")
    args = ap.parse_args(argv)
    if args.cmd == "generate":
        from barecuda.models.tokenizer import Tokenizer
        f = open_gguf(args.gguf)
        tok = Tokenizer(f)
        text = args.prompt if args.raw else tok.apply_chat_template([{"role": "user", "content": args.prompt}])
        ids = tok.encode(text)
        m = Llama(f, max_seq=args.max_seq, dtype=args.dtype)
        t0 = time.perf_counter()
        out = m.generate_ids(ids, args.max_new, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                             seed=args.seed, stop=sorted(tok.stop_ids))
        dt = time.perf_counter() - t0
        print(tok.decode(out, skip_special=True))
        print(f"[{len(ids)} prompt + {len(out)} new tokens in {dt:.3f} s]", file=sys.stderr)
        return 0
    m = Llama(args.gguf, max_seq=args.max_seq, dtype=args.dtype, fused=not args.unfused, pdl=args.pdl)
    r = m.bench(args.tokens, args.repeats)
    r.update(device=m.device.name, file=os.path.basename(args.gguf), load_s=m.load_seconds)
    if args.json:
        import json
        print(json.dumps(r))
    else:
        print(f"{r['file']} on {r['device']}: {r['tok_s']:.1f} tok/s ({r['tokens']} tokens, median of {args.repeats}), "
              f"{r['GB_s']:.0f} GB/s of weights, {r['nodes_per_token']} graph nodes per token "
              f"({m.nodes_per_layer} a layer{', PDL' if m.pdl else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
