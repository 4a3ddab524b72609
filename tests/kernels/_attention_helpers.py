"""Helpers of the attention tests (test_attention.py, test_attention_batch.py): the float64
reference. (Device round trips and the driver double's fixture: _matmul_helpers.)"""
import numpy as np


def ref_attention(q, k, v, scale, causal=False, causal_offset=0):
    """q [Sq, H, D], k/v [Skv, Hkv, D] float64 -> [Sq, H, D]."""
    sq, h, d = q.shape
    skv, hkv, _ = k.shape
    g = h // hkv
    out = np.zeros_like(q)
    for hh in range(h):
        s = q[:, hh, :] @ k[:, hh // g, :].T * scale
        if causal:
            i = np.arange(sq)[:, None]
            j = np.arange(skv)[None, :]
            s = np.where(j > i + causal_offset, -np.inf, s)
        m = s.max(axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        p = np.exp(s - m)
        den = p.sum(axis=1, keepdims=True)
        out[:, hh, :] = np.where(den > 0, (p @ v[:, hh // g, :]) / np.where(den > 0, den, 1), 0)
    return out
