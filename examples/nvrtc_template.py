"""A templated kernel: one source, instantiated for three types through NVRTC name expressions.

`Program.compile(name_expressions=[...])` makes NVRTC instantiate each template and
tells barecuda its mangled (lowered) name; `code.get_kernel("axpy<float>")` finds it,
and the kernel packs its arguments by the PTX types of that instantiation
(`a` as float32 for `axpy<float>`, float64 for `axpy<double>`).
"""
import numpy as np

import barecuda as bc

SOURCE = r"""
template <typename T>
__global__ void axpy(T *y, const T *x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
TYPES = {"float": np.float32, "double": np.float64, "int": np.int32}


def main():
    code = bc.Program(SOURCE, name="axpy.cu", std="c++17").compile(
        name_expressions=[f"axpy<{t}>" for t in TYPES])
    rng = np.random.default_rng()
    n = 4097
    for cname, dtype in TYPES.items():
        kernel = code.get_kernel(f"axpy<{cname}>")
        if dtype is np.int32:
            x = rng.integers(-1000, 1000, n, dtype=dtype)
            y = rng.integers(-1000, 1000, n, dtype=dtype)
            a = int(rng.integers(1, 6))
        else:
            x = rng.standard_normal(n).astype(dtype)
            y = rng.standard_normal(n).astype(dtype)
            a = float(rng.standard_normal())
        dx, dy = bc.to_device(x), bc.to_device(y)
        kernel.launch((n + 127) // 128, 128, dy, dx, a, n)
        got = dy.to_numpy()
        want = (dtype(a) * x + y).astype(dtype)
        if dtype is np.int32:
            np.testing.assert_array_equal(got, want)
        else:
            # the GPU fuses a*x + y into one FMA: compare with a float64 reference, a few ulps apart
            ref = float(dtype(a)) * x.astype(np.float64) + y
            tol = 4 * np.finfo(dtype).eps
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * (abs(a) * np.abs(x).max() + np.abs(y).max()))
        print(f"axpy<{cname}> OK as {code.lowered_name(f'axpy<{cname}>')}")


if __name__ == "__main__":
    main()
