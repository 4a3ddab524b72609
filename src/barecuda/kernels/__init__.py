"""barecuda.kernels: built-in CUDA kernels (norms, softmax, rope, elementwise, sampling,
matvec, GEMM, attention) as op functions with plan forms.

Only re-exports. Nothing heavy at import: no numpy, no NVRTC, no driver. Kernels are
loaded on first use through ``_registry.get`` (prebuilt package code, then the compile
cache, then NVRTC); ``python -m barecuda.kernels warmup`` loads them all ahead of time.
See docs/kernels.md.
"""
from barecuda.kernels._registry import get, table
from barecuda.kernels._norms import rmsnorm, layernorm
from barecuda.kernels._softmax import softmax
from barecuda.kernels._rope import rope
from barecuda.kernels._elementwise import silu_mul, gelu, silu, add, mul, embedding
from barecuda.kernels._sampling import argmax, sample
from barecuda.kernels._dequant import QuantWeight, dequantize, plan_dequantize
from barecuda.kernels._matvec import matvec, matvec_silu_mul, plan_matvec, plan_matvec_silu_mul
from barecuda.kernels._matmul import matmul, plan_matmul
from barecuda.kernels._attention import (attention_decode, attention_prefill, decode_workspace_size, kv_append,
                                         plan_attention_decode, plan_attention_prefill, plan_kv_append)

__all__ = ["get", "table", "rmsnorm", "layernorm", "softmax", "rope", "silu_mul", "gelu", "silu", "add", "mul",
           "embedding", "argmax", "sample",
           "QuantWeight", "dequantize", "plan_dequantize", "matvec", "matvec_silu_mul", "plan_matvec",
           "plan_matvec_silu_mul", "matmul", "plan_matmul", "attention_decode", "attention_prefill",
           "decode_workspace_size", "kv_append", "plan_attention_decode", "plan_attention_prefill", "plan_kv_append"]
