"""Vector add from CUDA C++ source: compile with NVRTC, launch, check against numpy.

Needs a GPU, numpy and NVRTC (from a barecuda checkout: `pip install ".[nvrtc]"`, or
`".[nvrtc-cu12]"` for a CUDA 12 driver). Run twice to see
the compile cache at work: the second run loads the kernel from disk.
"""
import time

import numpy as np

import barecuda as bc

SOURCE = r"""
extern "C" __global__ void vadd(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""


def main():
    t0 = time.perf_counter()
    code = bc.Program(SOURCE, name="vadd.cu").compile()      # cubin or PTX, whatever this driver loads best
    t1 = time.perf_counter()
    kernel = code.get_kernel("vadd")
    n = 1_000_003
    rng = np.random.default_rng()
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    da, db = bc.to_device(a), bc.to_device(b)
    out = bc.empty(n, "float32")
    kernel.launch((n + 255) // 256, 256, out, da, db, n)
    got = out.to_numpy()
    np.testing.assert_array_equal(got, a + b)
    print(f"vector add OK: {n} elements, {code.kind} for {code.arch}, NVRTC {bc.nvrtc_version()}, "
          f"compile {1e3 * (t1 - t0):.1f} ms, cache {bc.cache_info()['directory']}")


if __name__ == "__main__":
    main()
