"""The op fast path on the GPU (kernels/_opcall.pyx; its checks on the driver double:
test_args_opcall.py): a hit computes what the checks' launch computes, with torch tensors
(torch's stream ordered before ours) and with DeviceBuffers against numpy, for the row
ops and the other families. Runs with --gpu.
"""
import pytest

import barecuda as bc
import barecuda.kernels as K
from barecuda.kernels import _matmul as KMM
from barecuda.kernels import _matvec as KM
from barecuda.kernels import _opcall as O


gpu = pytest.mark.gpu
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch


def _close(torch, got, ref, dtype):
    err = (got.float() - ref.float()).abs().max().item()
    bound = TOL[dtype] * max(1.0, ref.float().abs().max().item())
    assert err <= bound, f"max error {err:.3g} > {bound:.3g}"


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_torch_hits_match_torch(dtype):
    torch = _torch_cuda()
    td = getattr(torch, dtype)
    fast = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    g = torch.Generator(device="cuda").manual_seed(7)
    w = torch.randn(4096, device="cuda", dtype=td, generator=g)
    y = torch.empty(5, 4096, device="cuda", dtype=td)
    gu = torch.empty(5, 2 * 1000, device="cuda", dtype=td)
    K.rmsnorm.clear()
    K.silu_mul.clear()
    h0 = O.stats()[0]
    for i in range(3):                                        # a miss, then hits, on fresh data each time
        x = torch.randn(5, 4096, device="cuda", dtype=td, generator=g)
        gu.normal_(generator=g)
        assert K.rmsnorm(x, w, out=y) is y
        s = K.silu_mul(gu)                                    # a new output; the up half at gate + 1000 elements
        torch.cuda.synchronize()
        _close(torch, y, torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), eps=1e-6), dtype)
        ref = torch.nn.functional.silu(gu[:, :1000].float()) * gu[:, 1000:].float()
        got = torch.from_dlpack(s) if dtype != "bfloat16" else torch.from_dlpack(s.view("uint16")).view(torch.bfloat16)
        _close(torch, got.reshape(5, 1000), ref, dtype)
    if fast:
        assert O.stats()[0] >= h0 + 4


@gpu
def test_gpu_torch_hit_orders_torchs_stream():
    """The producer's writes on torch's current (side) stream come before the op's launch
    on the legacy stream, on a hit as on the first call."""
    torch = _torch_cuda()
    ts = torch.cuda.Stream()
    x = torch.empty(64, 8192, device="cuda")
    y = torch.empty_like(x)
    K.add.clear()
    for i in range(4):
        with torch.cuda.stream(ts):
            torch.cuda._sleep(2_000_000)                      # the side stream is busy when the op is issued
            x.fill_(float(i + 1))
            assert K.add(x, x, out=y) is y                    # on the legacy stream (stream=None)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.full_like(y, 2.0 * (i + 1))), i


@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_buffer_hits_match_numpy(dtype):
    import numpy as np
    rng = np.random.default_rng(3)
    K.softmax.clear()
    h0 = O.stats()[0]
    y = bc.empty((7, 1000), dtype)
    for i in range(3):
        a = rng.standard_normal((7, 1000)).astype(np.float32)
        xb = bc.to_device(a) if dtype == "float32" else bc.to_device(
            (a.view(np.uint32) >> 16).astype(np.uint16)).view("bfloat16", (7, 1000))
        ref = (a.view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64) if dtype != "float32" else \
            a.astype(np.float64)
        assert K.softmax(xb, scale=0.5, out=y) is y
        bc.Device(0).synchronize()
        got = y.to_numpy().reshape(7, 1000) if dtype == "float32" else \
            (y.view("uint16", (7, 1000)).to_numpy().astype(np.uint32) << 16).view(np.float32)
        e_ = np.exp(0.5 * (ref - ref.max(axis=1, keepdims=True)))
        want = e_ / e_.sum(axis=1, keepdims=True)
        assert np.max(np.abs(got - want)) <= TOL[dtype] * 2, i
    assert O.stats()[0] == h0 + 2


@gpu
def test_gpu_family_hits_match_torch():
    """matvec and matmul (builtin) hits on fresh torch data compute what torch computes."""
    torch = _torch_cuda()
    fast = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    g = torch.Generator(device="cuda").manual_seed(5)
    w = torch.randn(300, 512, device="cuda", dtype=torch.float16, generator=g)
    y = torch.empty(300, device="cuda", dtype=torch.float16)
    o = torch.empty(64, 96, device="cuda", dtype=torch.float16)
    KM.matvec.clear()
    KMM.matmul.clear()
    h0 = O.stats()[0]
    for i in range(3):
        x = torch.randn(512, device="cuda", dtype=torch.float16, generator=g)
        a = torch.randn(64, 128, device="cuda", dtype=torch.float16, generator=g)
        b = torch.randn(128, 96, device="cuda", dtype=torch.float16, generator=g)
        assert KM.matvec(w, x, out=y) is y
        assert KMM.matmul(a, b, out=o, backend="builtin") is o
        torch.cuda.synchronize()
        _close(torch, y, w.float() @ x.float(), "float16")
        _close(torch, o, a.float() @ b.float(), "float16")
    if fast:
        assert O.stats()[0] >= h0 + 4
