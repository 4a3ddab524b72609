"""A real .cu file compiled by nvcc, launched by its plain C++ name.

`cuda/layernorm.cu` is ordinary CUDA C++ (no `extern "C"`), so nvcc mangles the
kernel's name (`_Z17layernorm_forwardPfS_S_PKfS1_S1_iif`). This example runs
`nvcc -ptx` at run time, loads the PTX with `Module.load`, and asks for the kernel by
its plain name: barecuda finds the one mangled entry that matches. Needs nvcc
(the CUDA toolkit) and numpy.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import barecuda as bc

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                    if os.environ.get("CUDA_HOME") else None)
    if not nvcc or not os.path.exists(nvcc):
        print("nvcc not found: install the CUDA toolkit or set CUDA_HOME", file=sys.stderr)
        return 2
    major, minor = bc.Device(0).compute_capability
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "layernorm.ptx")
        subprocess.run([nvcc, "-ptx", f"-arch=compute_{major}{minor}", "-o", ptx,
                        os.path.join(HERE, "cuda", "layernorm.cu")], check=True)
        module = bc.Module.load(ptx)
    kernel = module.get_kernel("layernorm_forward")          # plain name, not the mangled one
    rows, cols, eps = 257, 1024, 1e-5
    rng = np.random.default_rng()
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    dx, dw, db = bc.to_device(x), bc.to_device(w), bc.to_device(b)
    dy = bc.empty((rows, cols), "float32")
    dmean, drstd = bc.empty(rows, "float32"), bc.empty(rows, "float32")
    kernel.launch(rows, 256, dy, dmean, drstd, dx, dw, db, rows, cols, eps)
    y = dy.to_numpy()
    mean = x.astype(np.float64).mean(axis=1)
    rstd = 1.0 / np.sqrt(x.astype(np.float64).var(axis=1) + eps)
    want = (x - mean[:, None]) * rstd[:, None] * w + b
    np.testing.assert_allclose(dmean.to_numpy(), mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(drstd.to_numpy(), rstd, rtol=1e-4)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    print(f"nvcc layernorm OK: {kernel.name} found as 'layernorm_forward', {rows}x{cols}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
