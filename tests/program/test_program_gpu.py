"""Compiled kernels on a real GPU (``pytest --gpu``), checked against numpy on fresh random data.

Each NVRTC named in ``BARECUDA_TEST_NVRTC`` (paths separated by ``os.pathsep``; the
toolkit's and the pip wheel's are added when present) is also driven end to end in a
subprocess: compile for this device's driver, load, run, compare. That is the
version-skew check: an NVRTC newer than the driver must still give loadable code.
"""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy")

import barecuda as bc
from barecuda import _program
from _helpers import REPO

gpu = pytest.mark.gpu
pytestmark = [gpu, pytest.mark.skipif(not _program.nvrtc_available(), reason="NVRTC not found")]
RNG = np.random.default_rng()
EXAMPLES = os.path.join(REPO, "examples")

VADD = r"""
extern "C" __global__ void vadd(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""
TEMPLATE = r"""
template <typename T, int K>
__global__ void affine(T *y, const T *x, T a, T b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b * (T)K;
}
"""


def _f32(n):
    return RNG.standard_normal(n).astype(np.float32)


def _host(buf, dtype):
    return np.frombuffer(buf.copy_to(), dtype=dtype)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(tmp_path / "cache"))
    bc.clear_cache(disk=False)
    yield
    bc.clear_cache(disk=False)


@pytest.mark.parametrize("target", ["auto", "cubin", "ptx"])
def test_vadd_from_source(target):
    code = bc.Program(VADD).compile(target)
    if target == "ptx" and _program.ptx_version_of(code.code) > _program.ptx_isa_for(bc.driver_version()):
        with pytest.raises(bc.DriverVersionError):
            code.load()
        return
    k = code.get_kernel("vadd")
    n = 100_003
    a, b = _f32(n), _f32(n)
    out = bc.empty(n * 4)
    k.launch((n + 255) // 256, 256, out, bc.to_device(a), bc.to_device(b), n)
    np.testing.assert_array_equal(_host(out, np.float32), a + b)


@pytest.mark.parametrize("ctype,dtype,k", [("float", np.float32, 3), ("double", np.float64, 5), ("int", np.int32, 7)])
def test_template_instantiations(ctype, dtype, k):
    expr = f"affine<{ctype}, {k}>"
    code = bc.Program(TEMPLATE).compile(name_expressions=[expr])
    kern = code.get_kernel(expr)
    n = 5000
    if dtype is np.int32:
        x = RNG.integers(-10000, 10000, n, dtype=np.int32)
        a, b = int(RNG.integers(1, 9)), int(RNG.integers(1, 9))
    else:
        x = RNG.standard_normal(n).astype(dtype)
        a, b = float(RNG.standard_normal()), float(RNG.standard_normal())
    y = bc.empty(n * np.dtype(dtype).itemsize)
    kern.launch((n + 127) // 128, 128, y, bc.to_device(x), a, b, n)
    want = (dtype(a) * x + dtype(b) * dtype(k)).astype(dtype)
    got = _host(y, dtype)
    if dtype is np.int32:
        np.testing.assert_array_equal(got, want)
    else:
        # The GPU contracts a*x + c into one FMA (one rounding), numpy rounds twice: compare with a
        # float64 reference and a few float32 ulps of the operands' magnitude.
        ref = float(dtype(a)) * x.astype(np.float64) + float(dtype(b) * dtype(k))
        tol = 4 * np.finfo(dtype).eps
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * (abs(a) * np.abs(x).max() + abs(b * k)))


def test_cxx_plain_name_in_compiled_module():
    # No extern "C": the entry is mangled; a plain name finds it (Module.get_kernel).
    src = "__global__ void neg(float *y, const float *x, int n) { int i = threadIdx.x; if (i < n) y[i] = -x[i]; }"
    mod = bc.Program(src).compile().load()
    k = mod.get_kernel("neg")
    assert k.name.startswith("_Z3neg")
    x = _f32(100)
    y = bc.empty(400)
    k.launch(1, 128, y, bc.to_device(x), 100)
    np.testing.assert_array_equal(_host(y, np.float32), -x)


def test_headers_and_defines_on_gpu():
    src = '#include "op.h"\nextern "C" __global__ void f(float *y, const float *x) { y[threadIdx.x] = OP(x[threadIdx.x]); }'
    code = bc.Program(src, headers={"op.h": "#define OP(v) ((v) * SCALE + 1.0f)\n"}, defines={"SCALE": "3.0f"}).compile()
    x = _f32(64)
    y = bc.empty(256)
    code.get_kernel("f").launch(1, 64, y, bc.to_device(x))
    # x * 3 + 1 is one FMA on the GPU: compare with a float64 reference, a few float32 ulps apart.
    np.testing.assert_allclose(_host(y, np.float32), x.astype(np.float64) * 3.0 + 1.0, rtol=4e-7, atol=4e-7 * 3 * np.abs(x).max())


LIB = "__device__ float cube(float x) { return x * x * x; }"
MAIN = r"""
extern __device__ float cube(float x);
extern "C" __global__ void cubes(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = cube(x[i]) + 1.0f;
}
"""


def _check_cubes(code):
    n = 3000
    x = _f32(n)
    y = bc.empty(n * 4)
    code.get_kernel("cubes").launch((n + 255) // 256, 256, y, bc.to_device(x), n)
    np.testing.assert_allclose(_host(y, np.float32), x * x * x + 1.0, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not _program.nvjitlink_available(), reason="nvJitLink not found")
def test_link_two_programs_with_lto():
    a = bc.Program(LIB, rdc=True).compile("ltoir")
    b = bc.Program(MAIN, rdc=True).compile("ltoir")
    _check_cubes(bc.link([a, b]))


def test_link_with_the_driver_linker():
    # cuLink* with cubin inputs (no nvJitLink needed)
    a = bc.Program(LIB, rdc=True).compile("cubin")
    b = bc.Program(MAIN, rdc=True).compile("cubin")
    _check_cubes(bc.link([a, b], use_nvjitlink=False))


def test_library_api_on_every_device():
    code = bc.Program(TEMPLATE).compile(name_expressions=["affine<float, 2>"])
    lib = bc.Library.load(code)
    for d in range(bc.device_count()):
        with bc.Device(d):
            k = lib.get_kernel("affine<float, 2>", device=d)
            x = _f32(256)
            y = bc.empty(1024, device=d)
            k.launch(2, 128, y, bc.to_device(x, device=d), 2.0, 0.5, 256)
            np.testing.assert_allclose(_host(y, np.float32), 2.0 * x + 1.0, rtol=1e-6)
    lib.close()
    with pytest.raises(ValueError, match="closed"):
        lib.get_kernel("affine<float, 2>")


def _nvrtc_libraries():
    paths = [p for p in os.environ.get("BARECUDA_TEST_NVRTC", "").split(os.pathsep) if p]
    for p in ["/usr/local/cuda/lib64/libnvrtc.so.13"] + sorted(glob.glob(
            os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "nvidia", "cu13", "lib", "libnvrtc.so.13"))):
        if os.path.exists(p) and p not in paths:
            paths.append(p)
    return paths


@pytest.mark.parametrize("lib", _nvrtc_libraries() or [None])
def test_each_nvrtc_gives_code_this_driver_runs(lib, tmp_path):
    if lib is None:
        pytest.skip("no NVRTC path to try (set BARECUDA_TEST_NVRTC)")
    code = textwrap.dedent("""
        import numpy as np, barecuda as bc
        src = '''
        template <typename T> __global__ void twice(T *y, const T *x, int n)
        { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }
        '''
        oc = bc.Program(src).compile(name_expressions=['twice<float>'])
        x = np.random.default_rng().standard_normal(1000).astype(np.float32)
        y = bc.empty(4000)
        oc.get_kernel('twice<float>').launch(4, 256, y, bc.to_device(x), 1000)
        np.testing.assert_array_equal(np.frombuffer(y.copy_to(), dtype=np.float32), 2 * x)
        print(bc.nvrtc_version(), bc.driver_version(), oc.kind, oc.arch)
    """)
    env = dict(os.environ, BARECUDA_NVRTC=lib, BARECUDA_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    print(lib, r.stdout.strip())


@pytest.mark.parametrize("script", ["nvrtc_vector_add.py", "nvrtc_template.py", "nvrtc_lto_link.py",
                                    "nvcc_plain_name.py"])
def test_examples_run(script, tmp_path):
    if script == "nvrtc_lto_link.py" and not _program.nvjitlink_available():
        pytest.skip("nvJitLink not found")
    env = dict(os.environ, BARECUDA_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)], capture_output=True, text=True,
                       env=env, timeout=300)
    if script == "nvcc_plain_name.py" and r.returncode == 2:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout
