"""Shared by tests/kernels/test_dequant.py and test_matvec.py: random GGUF blocks, gguf's
dequantization as the reference, device-to-float64 reads, and the driver double's kernel
loader (PTX with its ISA line lowered). Needs numpy and gguf (the callers importorskip gguf).
"""
import numpy as np

import gguf
from gguf import quants as gq
from barecuda.kernels import _dequant as D

QFORMATS = ["q4_0", "q4_1", "q8_0", "q4_k", "q6_k"]
GT = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_1": gguf.GGMLQuantizationType.Q4_1,
      "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_k": gguf.GGMLQuantizationType.Q4_K,
      "q6_k": gguf.GGMLQuantizationType.Q6_K}
# byte offsets of the f16 scale fields in each block (ggml-common.h)
F16_FIELDS = {"q4_0": (0,), "q4_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2), "q6_k": (208,)}


def random_blocks(rng, fmt, n_weights):
    """Random bytes for n_weights of ``fmt`` with sane f16 scales: any such bytes are valid
    blocks (every bit pattern of the quants and 6/8-bit scales means something)."""
    _, _, qk, nb = D.format_info(fmt)
    raw = rng.integers(0, 256, size=(n_weights // qk, nb), dtype=np.uint8)
    for off in F16_FIELDS[fmt]:
        v = (rng.uniform(0.002, 0.05, raw.shape[0]) * rng.choice([-1, 1], raw.shape[0])).astype(np.float16)
        if fmt in ("q4_k",):
            v = np.abs(v)
        raw[:, off:off + 2] = v.view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


def reference(raw, fmt, shape):
    return gq.dequantize(raw, GT[fmt]).astype(np.float64).reshape(shape)


def from_dev(b, dtype):
    """float64 numpy copy of a device array, in its shape (a dtype view is flat)."""
    if dtype == "float32":
        return b.to_numpy().astype(np.float64).reshape(b.shape)
    u = b.view("uint16").to_numpy().reshape(b.shape)
    if dtype == "float16":
        return u.view(np.float16).astype(np.float64)
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def rounding(dtype):
    return {"float32": 0.0, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]


from _helpers import lowered_ptx_get  # noqa: E402,F401  (re-exported: the kernel tests import it from here)


