"""The same Llama written plainly in torch: the comparison rows of the decode benchmark.

Not used by barecuda itself (torch is never imported by the package otherwise). The
weights are the GGUF's, dequantized on the host (``barecuda.models.reference``) to
float16 (or float32): so for quantized files torch streams 16-bit weights, not the
file's blocks. Static KV cache; Q/K/V and gate/up each one matmul; greedy. Two modes:

- eager: one Python call per token, every op launched by torch;
- graph: one token captured in a ``torch.cuda.CUDAGraph`` (the position and the token
  live on the device, as in barecuda's loop: the gpt-fast recipe) and replayed.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence

__all__ = ["TorchLlama"]


class TorchLlama:
    def __init__(self, path: str, *, max_seq: int = 256, dtype: Any = None, device: str = "cuda") -> None:
        import numpy as np
        import torch
        from barecuda.models.gguf import open_gguf
        from barecuda.models.reference import LlamaConfig, dequantize_tensor, rope_inv_freq
        self.torch = torch
        dtype = dtype or torch.float16
        f = open_gguf(path)
        c = LlamaConfig.from_gguf(f)
        c.check(f)
        self.cfg, self.max_seq, self.dtype, self.dev = c, max_seq, dtype, device

        def W(name: str) -> Any:
            return torch.from_numpy(dequantize_tensor(f.tensor(name))).to(device=device, dtype=dtype)

        self.emb = W("token_embd.weight")
        self.out = self.emb if c.tied_output else W("output.weight")
        self.out_norm = W("output_norm.weight")
        self.layers = []
        for i in range(c.n_layer):
            p = f"blk.{i}."
            self.layers.append(dict(
                an=W(p + "attn_norm.weight"), fn=W(p + "ffn_norm.weight"),
                qkv=torch.cat([W(p + "attn_q.weight"), W(p + "attn_k.weight"), W(p + "attn_v.weight")]),
                wo=W(p + "attn_output.weight"), gu=torch.cat([W(p + "ffn_gate.weight"), W(p + "ffn_up.weight")]),
                wd=W(p + "ffn_down.weight")))
        inv = torch.from_numpy(np.asarray(rope_inv_freq(c, f), dtype=np.float64))
        ang = torch.arange(max_seq, dtype=torch.float64)[:, None] * inv[None]
        self.cos = torch.cos(ang).to(device=device, dtype=torch.float32)
        self.sin = torch.sin(ang).to(device=device, dtype=torch.float32)
        hd, nkv = c.head_dim, c.n_head_kv
        self.k_cache = [torch.zeros(max_seq, nkv, hd, device=device, dtype=dtype) for _ in range(c.n_layer)]
        self.v_cache = [torch.zeros(max_seq, nkv, hd, device=device, dtype=dtype) for _ in range(c.n_layer)]
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.tok = torch.zeros((), dtype=torch.long, device=device)
        self.ar = torch.arange(max_seq, device=device)
        self.weight_bytes = sum(t.numel() * t.element_size() for L in self.layers for t in L.values()) + \
            self.out.numel() * self.out.element_size()
        self.graph: Any = None

    def _norm(self, x: Any, w: Any) -> Any:
        t = self.torch
        xf = x.float()
        return (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.eps)).to(self.dtype) * w

    def _rope(self, x: Any) -> Any:
        n = self.cfg.n_rot
        p = self.pos.view(1)
        cos, sin = self.cos.index_select(0, p)[0], self.sin.index_select(0, p)[0]
        xf = x.float()
        x0, x1 = xf[..., 0:n:2], xf[..., 1:n:2]
        out = xf.clone()
        out[..., 0:n:2] = x0 * cos - x1 * sin
        out[..., 1:n:2] = x0 * sin + x1 * cos
        return out.to(self.dtype)

    def step(self) -> Any:
        """One token at the device-held position: logits; then tok = argmax, pos += 1 (in place)."""
        t, c = self.torch, self.cfg
        F = t.nn.functional
        hd, nh, nkv = c.head_dim, c.n_head, c.n_head_kv
        x = self.emb.index_select(0, self.tok.view(1))       # no host read of the token (graph-safe)
        mask = (self.ar <= self.pos)
        for li, L in enumerate(self.layers):
            h = self._norm(x, L["an"])
            qkv = h @ L["qkv"].T
            q = self._rope(qkv[:, :nh * hd].view(1, nh, hd))
            k = self._rope(qkv[:, nh * hd:(nh + nkv) * hd].view(1, nkv, hd))
            v = qkv[:, (nh + nkv) * hd:].view(1, nkv, hd)
            self.k_cache[li].index_copy_(0, self.pos[None], k)
            self.v_cache[li].index_copy_(0, self.pos[None], v)
            # GQA by expand (repeat_interleave with an int count syncs to size its output:
            # that broke the CUDA-graph capture on the H200 run of 12:50)
            S, g = self.max_seq, nh // nkv
            K = self.k_cache[li][:, :, None].expand(S, nkv, g, hd).reshape(S, nh, hd).transpose(0, 1)
            V = self.v_cache[li][:, :, None].expand(S, nkv, g, hd).reshape(S, nh, hd).transpose(0, 1)
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[:, None], K[:, None], V[:, None],
                                               attn_mask=mask[None, None, None])
            x = x + o.reshape(1, nh * hd) @ L["wo"].T
            h = self._norm(x, L["fn"])
            gu = h @ L["gu"].T
            g, u = gu[:, :c.ffn_dim], gu[:, c.ffn_dim:]
            x = x + (F.silu(g) * u) @ L["wd"].T
        logits = self._norm(x, self.out_norm) @ self.out.T
        self.tok.copy_(logits[0].argmax())
        self.pos.add_(1)
        return logits[0]

    def reset(self, token: int = 1) -> None:
        self.pos.zero_()
        self.tok.fill_(token)

    def capture(self) -> None:
        t = self.torch
        s = t.cuda.Stream()
        s.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(s):
            for _ in range(2):
                self.reset()
                self.step()
        t.cuda.current_stream().wait_stream(s)
        self.graph = t.cuda.CUDAGraph()
        self.reset()
        import gc
        gc.collect()                # no finalizer of another CUDA user may free memory mid-capture
        gc.disable()
        try:
            with t.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.logits = self.step()
        finally:
            gc.enable()

    def bench(self, n_tokens: int = 128, repeats: int = 5, graph: bool = True) -> Dict[str, Any]:
        t = self.torch
        if graph and self.graph is None:
            self.capture()
        times: List[float] = []
        with t.inference_mode():
            for _ in range(repeats + 1):
                self.reset()
                t.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n_tokens):
                    if graph:
                        self.graph.replay()
                    else:
                        self.step()
                t.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        times = sorted(times[1:])
        med = times[len(times) // 2]
        return {"tokens": n_tokens, "seconds": med, "tok_s": n_tokens / med, "weight_bytes": self.weight_bytes}

    def generate(self, prompt: Sequence[int], n: int) -> List[int]:
        """Greedy ids after ``prompt`` (eager)."""
        t = self.torch
        out: List[int] = []
        with t.inference_mode():
            self.reset(prompt[0])
            for i in range(len(prompt) + n - 1):
                self.step()
                if i + 1 < len(prompt):
                    self.tok.fill_(prompt[i + 1])
                else:
                    out.append(int(self.tok))
        return out
