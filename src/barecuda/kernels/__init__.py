"""barecuda.kernels: built-in CUDA kernels (norms, softmax, rope, elementwise, sampling,
matvec, GEMM, attention) as op functions with plan forms.

Only re-exports. Nothing heavy at import: no numpy, no NVRTC, no driver. Kernels are
loaded on first use through ``_registry.get`` (prebuilt package code, then the compile
cache, then NVRTC); ``python -m barecuda.kernels warmup`` loads them all ahead of time.
See docs/kernels.md.
"""
from barecuda.kernels._registry import get, table

__all__ = ["get", "table"]
