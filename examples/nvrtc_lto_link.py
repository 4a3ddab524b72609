"""Two programs linked with link-time optimization (nvJitLink).

`activation.cu` defines a device function; `apply.cu` declares it `extern` and calls
it from a kernel. Each is compiled to LTO-IR (`rdc=True`, `target="ltoir"`) and
`bc.link` optimizes across both into one cubin. Needs a GPU, numpy and nvJitLink
(from a barecuda checkout: `pip install ".[nvrtc]"`, or `".[nvrtc-cu12]"` for a CUDA 12 driver).
"""
import numpy as np

import barecuda as bc

ACTIVATION = r"""
__device__ float gelu_tanh(float x) {
    const float c = 0.7978845608028654f;   // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
"""
APPLY = r"""
extern __device__ float gelu_tanh(float x);
extern "C" __global__ void apply_gelu(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu_tanh(x[i]);
}
"""


def main():
    lib = bc.Program(ACTIVATION, name="activation.cu", rdc=True).compile("ltoir")
    app = bc.Program(APPLY, name="apply.cu", rdc=True).compile("ltoir")
    linked = bc.link([lib, app])
    kernel = linked.get_kernel("apply_gelu")
    n = 100_003
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    dx, dy = bc.to_device(x), bc.empty(n, "float32")
    kernel.launch((n + 255) // 256, 256, dy, dx, n)
    got = dy.to_numpy()
    xd = x.astype(np.float64)
    want = 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print(f"LTO link OK: {len(lib)} + {len(app)} bytes of LTO-IR -> {len(linked)}-byte cubin for {linked.arch}, "
          f"nvJitLink {bc.nvjitlink_version()}")


if __name__ == "__main__":
    main()
