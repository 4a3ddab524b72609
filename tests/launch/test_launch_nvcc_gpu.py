"""nvcc-compiled kernels on a real GPU (``pytest --gpu``; skipped where nvcc is missing):
signed integer parameters of every width (nvcc declares C ``int`` as ``.u32``) and C++
kernels launched by their plain (unmangled) name, checked against numpy."""
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import Module

gpu = pytest.mark.gpu
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
RNG = np.random.default_rng()

PUT_SRC = r"""
extern "C" __global__ void put(long long *o, int a, short b, signed char c, long long d,
                               unsigned int e, unsigned short f, unsigned char g,
                               unsigned long long h) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        o[0] = a; o[1] = b; o[2] = c; o[3] = d;
        o[4] = (long long)e; o[5] = (long long)f; o[6] = (long long)g; o[7] = (long long)h;
    }
}
"""
# numpy type of each scalar parameter, in order
PUT_TYPES = [np.int32, np.int16, np.int8, np.int64, np.uint32, np.uint16, np.uint8, np.uint64]

CXX_SRC = r"""
__global__ void scale_add(float *out, const float *x, float a, int offset, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + (float)offset;
}
__global__ void twice(float *o, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] *= 2.0f; }
__global__ void twice(double *o, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] *= 2.0; }
"""


def nvcc(src, kind, tmp_path):
    dev = bc.Device(0)
    major, minor = dev.compute_capability
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    out = tmp_path / f"k.{kind}"
    arch = f"compute_{major}{minor}" if kind == "ptx" else f"sm_{major}{minor}"
    subprocess.run(["nvcc", f"--{kind}", f"-arch={arch}", str(cu), "-o", str(out)], check=True)
    return out.read_bytes()


def c_widened(vals):
    """What the kernel stores: each value as its C parameter type (two's complement
    of the parameter's width), then converted to long long."""
    return np.array([np.array(v % (1 << (8 * np.dtype(t).itemsize)), dtype=np.uint64).astype(t).astype(np.int64)
                     for v, t in zip(vals, PUT_TYPES)], dtype=np.int64)


def edge_values(t):
    info = np.iinfo(t)
    vals = [int(info.min), int(info.max), 0, -1]
    return vals


@gpu
@needs_nvcc
@pytest.mark.parametrize("kind", ["ptx", "cubin"])
def test_signed_parameters_every_width(kind, tmp_path):
    data = nvcc(PUT_SRC, kind, tmp_path)
    mod = Module.from_ptx(data) if kind == "ptx" else Module.from_cubin(data)
    k = mod.get_kernel("put")
    out = bc.zeros(8, "int64")
    for pick in range(4):
        vals = [edge_values(t)[pick] for t in PUT_TYPES]
        k.launch(1, 1, out, *vals)
        bc.Device(0).synchronize()
        want = c_widened(vals)
        np.testing.assert_array_equal(out.to_numpy(), want)
    # random values in each width's combined range, against numpy's wrap-around
    for _ in range(8):
        vals = []
        for t in PUT_TYPES:
            bits = 8 * np.dtype(t).itemsize
            vals.append(int(RNG.integers(-(1 << (bits - 1)), (1 << bits) - 1, dtype=np.int64, endpoint=True))
                        if bits < 64 else int(RNG.integers(-(1 << 63), (1 << 63) - 1, dtype=np.int64)))
        k.launch(1, 1, out, *vals)
        bc.Device(0).synchronize()
        want = c_widened(vals)
        np.testing.assert_array_equal(out.to_numpy(), want)
    # one past each end is refused before the launch
    for j, t in enumerate(PUT_TYPES):
        bits = 8 * np.dtype(t).itemsize
        for bad in (-(1 << (bits - 1)) - 1, (1 << bits)):
            vals = [0] * len(PUT_TYPES)
            vals[j] = bad
            with pytest.raises(OverflowError):
                k.launch(1, 1, out, *vals)


@gpu
@needs_nvcc
@pytest.mark.parametrize("kind", ["ptx", "cubin"])
def test_cxx_kernel_by_plain_name(kind, tmp_path):
    data = nvcc(CXX_SRC, kind, tmp_path)
    mod = Module.from_ptx(data) if kind == "ptx" else Module.from_cubin(data)
    if kind == "cubin" and bc.driver_version() < (12, 4):
        pytest.skip("listing a cubin's kernels needs a CUDA 12.4 driver")
    k = mod.get_kernel("scale_add")
    assert k.name.startswith("_Z9scale_add")
    n = 1000
    x = RNG.standard_normal(n).astype(np.float32)
    dx = bc.to_device(x)
    out = bc.zeros(n, "float32")
    # A cubin carries no parameter types: a float slot takes an explicitly typed scalar
    # (a Python float would be refused, see test_launch_gpu.test_nvcc_cubin_and_fatbin).
    a = np.float32(1.5) if kind == "cubin" else 1.5
    k.launch((n + 255) // 256, 256, out, dx, a, -7, n)
    bc.Device(0).synchronize()
    np.testing.assert_allclose(out.to_numpy(), 1.5 * x - 7, rtol=1e-6)
    with pytest.raises(ValueError, match="ambiguous") as info:
        mod.get_kernel("twice")
    assert "_Z5twicePfi" in str(info.value) and "_Z5twicePdi" in str(info.value)
    t = mod.get_kernel("_Z5twicePfi")
    t.launch((n + 255) // 256, 256, out, n)
    bc.Device(0).synchronize()
    np.testing.assert_allclose(out.to_numpy(), 2 * (1.5 * x - 7), rtol=1e-6)
