"""Shared by tests/kernels/test_matmul.py and test_matmul_cublaslt.py: device copies of
numpy operands in each dtype with their float64 values, the float64 checks of a product,
whether cuBLASLt loads here, and the fixtures for the driver double (its kernel loader,
cuBLASLt made unfindable)."""
import numpy as np
import pytest

import barecuda as bc
from barecuda.kernels import _matmul as MM
from barecuda.kernels import _registry


def to_dev(x, dtype, stream=None):
    """(device buffer of dtype holding x rounded, the rounded values as float64); the copy is
    ordered on ``stream`` when one is given."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return bc.to_device(x, stream=stream), x.astype(np.float64)
    if dtype == "float16":
        h = x.astype(np.float16)
        return bc.to_device(h, stream=stream), h.astype(np.float64).reshape(x.shape)
    u = x.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    back = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bc.to_device(bits, stream=stream).view("bfloat16", x.shape), back.reshape(x.shape)


def from_dev(b, dtype):
    shape = tuple(b.shape)
    if dtype == "float32":
        return b.to_numpy().reshape(shape).astype(np.float64)
    u = b.view("uint16", shape).to_numpy().reshape(shape)
    if dtype == "float16":
        return u.view(np.float16).astype(np.float64)
    return (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.fixture
def fake(fake, monkeypatch):
    """The driver double, with kernels loaded from PTX whose ISA line is lowered to the
    double's driver (_helpers.lowered_ptx_get)."""
    from _helpers import lowered_ptx_get
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    return fake


@pytest.fixture
def no_cublaslt(monkeypatch, tmp_path):
    """cuBLASLt cannot be found (BARECUDA_CUBLASLT names a missing file); "auto"'s memory
    of earlier failures is cleared before and after."""
    monkeypatch.setenv("BARECUDA_CUBLASLT", str(tmp_path / "libcublasLt.so.13"))
    MM._lt_broken.clear()
    yield
    MM._lt_broken.clear()


def lt_available():
    try:
        from barecuda.kernels import _cublaslt
        return _cublaslt.is_available()
    except ImportError:
        return False


# the builtin kernel always; cuBLASLt too where it can be loaded (the device image has it)
LT_BACKENDS = ("builtin", "cublaslt") if lt_available() else ("builtin",)
needs_lt = pytest.mark.skipif(not lt_available(), reason="libcublasLt not found (pip install nvidia-cublas)")


def random_operands(rng, m, n, k, ta, tb, dtype):
    """Random a (m x k, stored k x m when ta) and b (k x n, stored n x k when tb) on the
    device in dtype, and the float64 product of the values stored."""
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    ad, a64 = to_dev(a, dtype)
    bd, b64 = to_dev(b, dtype)
    return ad, bd, (a64.T if ta else a64) @ (b64.T if tb else b64)


def assert_matches_float64(backend, dtype, ta, tb, rng, shapes):
    """matmul on `backend` against float64 for each (m, n, k): max error < 1e-3 in fp32,
    2e-3 / 1e-2 of the largest |value| in fp16 / bf16."""
    tol = {"float32": 1e-3, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    for m, n, k in shapes:
        ad, bd, ref = random_operands(rng, m, n, k, ta, tb, dtype)
        got = from_dev(MM.matmul(ad, bd, trans_a=ta, trans_b=tb, backend=backend), dtype)
        scale = max(1.0, np.abs(ref).max()) if dtype != "float32" else 1.0
        assert np.abs(got - ref).max() < tol * scale, (m, n, k)


def alpha_beta_batch(rng, bt, m, n, k, dtype):
    """The builtin matmul with out=c, alpha=0.5, beta=-2 of a [bt, m, k] batch by a [k, n]
    b broadcast over it: (the result read back, its float64 reference)."""
    a = rng.standard_normal((bt, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((bt, m, n)).astype(np.float32)
    ad, a64 = to_dev(a, dtype)
    bd, b64 = to_dev(b, dtype)
    cd, c64 = to_dev(c, dtype)
    MM.matmul(ad, bd, out=cd, alpha=0.5, beta=-2.0, backend="builtin")
    return from_dev(cd, dtype), 0.5 * (a64 @ b64) + -2.0 * c64
