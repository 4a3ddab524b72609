"""A decode-style inference loop as a CUDA graph whose kernel nodes change every step.

Each step is a chain of 100 small kernels on one vector x (``x = alpha*x + src`` over
the first n elements). Three arguments change from step to step, as in a decoder:
the pointer into a "KV cache" (``src`` of node 0), a scale (``alpha`` of node 1) and a
sequence length (``n`` of node 2). The loop runs twice:

1. eagerly, 100 ``Kernel.launch`` calls per step;
2. as one executable graph: per step three ``ExecKernelNode.set_arg`` calls and one
   ``GraphExec.launch``.

Both compute the same float operations in the same order, so the results must be
bitwise equal; the script checks it and prints the time per step of each way.

Run: ``python examples/decode_loop.py [--steps N]`` (needs a GPU and numpy).
"""
import argparse
import time

import numpy as np

import barecuda as bc
from barecuda._ptx_samples import AXPB    # the kernel's PTX: x[i] = alpha * x[i] + src[i] for i < n


N = 4096            # vector length
NODES = 100         # kernels per step
SLOTS = 64          # "KV cache" rows


def step_args(step, x, kv, row_bytes):
    """(src, alpha, n) of nodes 0, 1, 2 at `step`; the other nodes keep their arguments."""
    src = kv.ptr + (step % SLOTS) * row_bytes           # pointer into the cache
    alpha = 1.0 - 1.0 / (2 + step % 7)                  # a step-dependent scale
    n = N // 2 + (step * 37) % (N // 2)                 # a growing/wrapping length
    return src, alpha, n


def run_eager(kernel, steps, x, kv, fixed_src, s, row_bytes):
    blocks = (N + 255) // 256
    for step in range(steps):
        src, alpha, n = step_args(step, x, kv, row_bytes)
        kernel.launch(blocks, 256, x, src, 0.5, N, stream=s)
        kernel.launch(blocks, 256, x, fixed_src, alpha, N, stream=s)
        kernel.launch(blocks, 256, x, fixed_src, 0.5, n, stream=s)
        for _ in range(NODES - 3):
            kernel.launch(blocks, 256, x, fixed_src, 0.5, N, stream=s)


def build_graph(kernel, x, kv, fixed_src):
    blocks = (N + 255) // 256
    g = bc.Graph()
    prev = g.add_kernel(kernel, blocks, 256, x, kv, 0.5, N)
    nodes = [prev]
    for j in range(1, NODES):
        prev = g.add_kernel(kernel, blocks, 256, x, fixed_src, 0.5, N, depends_on=prev)
        nodes.append(prev)
    return g, nodes


def run_graph(exe, handles, steps, x, kv, s, row_bytes):
    h0, h1, h2 = handles
    for step in range(steps):
        src, alpha, n = step_args(step, x, kv, row_bytes)
        h0.set_arg(1, src)
        h1.set_arg(2, alpha)
        h2.set_arg(3, n)
        exe.launch(s)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    rng = np.random.default_rng()
    kernel = bc.Module.from_ptx(AXPB).get_kernel("axpb")
    s = bc.Stream()
    x0 = rng.standard_normal(N).astype(np.float32)
    kv_host = rng.standard_normal((SLOTS, N)).astype(np.float32)
    fixed_host = (rng.standard_normal(N) * 1e-3).astype(np.float32)
    kv = bc.to_device(kv_host, stream=s)
    fixed_src = bc.to_device(fixed_host, stream=s)
    row_bytes = N * 4

    x = bc.to_device(x0, stream=s)
    s.synchronize()
    t0 = time.perf_counter()
    run_eager(kernel, args.steps, x, kv, fixed_src, s, row_bytes)
    s.synchronize()
    t_eager = time.perf_counter() - t0
    eager = x.to_numpy(stream=s)

    x.copy_from(x0, stream=s)
    g, nodes = build_graph(kernel, x, kv, fixed_src)
    exe = g.instantiate(upload=s)
    handles = [exe.kernel_node(nodes[i]) for i in range(3)]
    s.synchronize()
    t0 = time.perf_counter()
    run_graph(exe, handles, args.steps, x, kv, s, row_bytes)
    exe.synchronize()
    t_graph = time.perf_counter() - t0
    graphed = x.to_numpy(stream=s)

    if not np.array_equal(eager, graphed):
        bad = int(np.argmax(eager != graphed))
        raise SystemExit(f"MISMATCH at element {bad}: eager {eager[bad]!r}, graph {graphed[bad]!r}")
    print(f"{args.steps} steps of {NODES} kernels: graph result matches eager bitwise")
    print(f"eager: {t_eager / args.steps * 1e6:9.1f} us/step   graph + 3 set_arg: "
          f"{t_graph / args.steps * 1e6:9.1f} us/step   ({t_eager / t_graph:.2f}x)")


if __name__ == "__main__":
    main()
