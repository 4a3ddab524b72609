"""The peers' rows: cuda.core, cuda.bindings, CuPy, PyTorch (and Triton, ctypes),
measured the same way as barecuda's rows where they are installed.

Owns: each peer's launch row (the 4-argument kernel of barecuda/bench/context.py,
launched the way that library's users launch it), allocation rows and copy rows,
and ``installed_versions`` (package metadata only: nothing is imported; the doctor
uses it too). A peer that is not installed gives an n/a row saying so. Peers are
imported with plain ``import`` in the builders and their API checked with
attributes; nothing is probed by executing strings.
"""
import os
import sys
import tempfile
from typing import Dict

from barecuda.bench.context import K4, K4_N, K4_X, PTX
from barecuda.bench.harness import NotAvailable, Row, py_row, timed_to_sync, why

__all__ = ["installed_versions", "PEER_DISTRIBUTIONS", "launch_rows", "ALLOC_PEERS", "COPY_PEERS", "versions",
           "torch_tensor_args", "cupy_array_args", "not_installed"]

# Distributions reported by installed_versions(), by import-free metadata lookup.
PEER_DISTRIBUTIONS = ("cuda-core", "cuda-bindings", "cuda-python", "cupy-cuda13x", "cupy-cuda12x", "cupy",
                      "torch", "triton", "numpy", "pytest-benchmark", "Cython")

versions: Dict[str, str] = {}      # peer -> version, filled by the builders that ran (imported) it


def installed_versions(names=PEER_DISTRIBUTIONS):
    """``{distribution: version}`` of the installed ones among ``names``, read from
    package metadata (``importlib.metadata``): nothing is imported."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:     # Python < 3.8
        return {}
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
        except Exception:   # noqa: BLE001 -- broken metadata of one package is not our failure
            pass
    return out


def not_installed(e):
    return ("not installed (" + why(e) + ")") if isinstance(e, ImportError) else why(e)


def _cuda_core():
    """cuda.core's public names (cuda.core >= 0.4), else its experimental namespace."""
    import cuda.core as cc
    if not hasattr(cc, "launch"):
        from cuda.core import experimental as cc
    versions["cuda.core"] = getattr(sys.modules.get("cuda.core"), "__version__", "?")
    return cc


# ------------------------------------------------------------------ launch
def _cuda_core_row(ctx):
    import numpy as np
    cc = _cuda_core()
    dev = cc.Device(0)
    dev.set_current()
    # a blocking stream, as the raw C reference's (cuda.core's default is non-blocking,
    # which the driver launches onto for less: docs/architecture.md, benchmark method)
    cs = dev.create_stream(options=cc.StreamOptions(nonblocking=False))
    obj = cc.ObjectCode.from_ptx(PTX.encode())
    ck = obj.get_kernel(K4)
    cfg = cc.LaunchConfig(grid=1, block=1)
    bo = dev.allocate(4096, stream=cs)
    bi = dev.allocate(4096, stream=cs)
    ctx.keep.append((obj, bo, bi, cs))
    ns = {"launch": cc.launch, "cs": cs, "cfg": cfg, "ck": ck, "bo": bo, "bi": bi,
          "n": np.uint32(K4_N), "x": np.float32(K4_X)}
    return "launch(cs, cfg, ck, bo, bi, n, x)", ns, "cs.sync()"


def _cuda_bindings_row(ctx):
    from cuda.bindings import driver
    import cuda.bindings
    versions["cuda.bindings"] = getattr(cuda.bindings, "__version__", "?")
    f = driver.CUfunction(ctx.raw_fn[K4])
    st = driver.CUstream(ctx.raw_stream)
    params = ctx.raw_params[K4].address
    err, = driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, params, 0)
    if int(err) != 0:
        raise RuntimeError(f"cuLaunchKernel returned {err}")
    driver.cuStreamSynchronize(st)
    ns = {"launch": driver.cuLaunchKernel, "sync": driver.cuStreamSynchronize, "f": f, "st": st, "p": params}
    return "launch(f, 1, 1, 1, 1, 1, 1, 0, st, p, 0)", ns, "sync(st)"


def _cupy_row(ctx):
    import numpy as np
    import cupy
    versions["cupy"] = cupy.__version__
    d = tempfile.mkdtemp(prefix="barecuda-bench-")
    path = os.path.join(d, "bench.ptx")
    with open(path, "w") as fh:
        fh.write(PTX)
    mod = cupy.RawModule(path=path)
    f = mod.get_function(K4)
    cs = cupy.cuda.Stream(non_blocking=False)
    co = cupy.zeros(1024, dtype=cupy.float32)
    ci = cupy.ones(1024, dtype=cupy.float32)
    args = (co, ci, np.uint32(K4_N), np.float32(K4_X))
    ctx.keep.append((mod, co, ci))
    return "f((1,), (1,), args, stream=cs)", {"f": f, "args": args, "cs": cs}, "cs.synchronize()"


def _torch_cuda():
    import torch
    versions["torch"] = torch.__version__
    if not torch.cuda.is_available():
        raise NotAvailable("torch.cuda.is_available() is False")
    return torch


def _torch_row(ctx):
    torch = _torch_cuda()
    a = torch.ones(1, device="cuda")
    b = torch.ones(1, device="cuda")
    c = torch.empty(1, device="cuda")
    torch.add(a, b, out=c)
    torch.cuda.synchronize()
    ts = torch.cuda.current_stream()
    return "torch.add(a, b, out=c)", {"torch": torch, "a": a, "b": b, "c": c, "ts": ts}, "ts.synchronize()"


# ------------------------------------------------------------------ tensors for barecuda's launch
# (launch_rows.tensor_rows): four 1024-float arrays of the library, its own stream made
# its current stream around each round, and the sync statement.
def torch_tensor_args(ctx):
    """``(args, stream, sync, setup, teardown)``: 4 torch tensors on device 0."""
    torch = _torch_cuda()
    ts = torch.cuda.Stream(device=0)
    with torch.cuda.stream(ts):
        args = [torch.ones(1024, device="cuda:0") for _ in range(4)]
    ts.synchronize()
    setup, teardown = torch_stream_switch(torch, ts)
    ctx.keep.append((args, ts))
    return args, ts, "s.synchronize()", setup, teardown


def torch_stream_switch(torch, ts):
    """``(setup, teardown)`` for a row's rounds: make ``ts`` torch's current stream on
    device 0, then give the previous one back."""
    before = []

    def setup():
        before.append(torch.cuda.current_stream(0))
        torch.cuda.set_stream(ts)

    def teardown():
        torch.cuda.set_stream(before.pop())
    return setup, teardown


def cupy_array_args(ctx):
    """``(args, stream, sync, setup, teardown)``: 4 CuPy arrays on device 0."""
    import cupy
    versions["cupy"] = cupy.__version__
    with cupy.cuda.Device(0):
        cs = cupy.cuda.Stream(non_blocking=True)
        with cs:
            args = [cupy.ones(1024, dtype=cupy.float32) for _ in range(4)]
        cs.synchronize()
    before = []

    def setup():
        before.append(cupy.cuda.get_current_stream())
        cs.use()

    def teardown():
        before.pop().use()
    ctx.keep.append((args, cs))
    return args, cs, "s.synchronize()", setup, teardown


def _make_triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def bc_bench_triton(x_ptr, y_ptr, n, a):
        tl.store(y_ptr, tl.load(x_ptr) * a + n)

    return bc_bench_triton


def _triton_row(ctx):
    import triton
    torch = _torch_cuda()
    versions["triton"] = triton.__version__
    k = _make_triton_kernel()
    x = torch.ones(16, device="cuda")
    y = torch.empty(16, device="cuda")
    grid = (1,)
    k[grid](x, y, K4_N, K4_X)       # compile + warm up
    torch.cuda.synchronize()
    ts = torch.cuda.current_stream()
    return "k[grid](x, y, 7, 1.5)", {"k": k, "grid": grid, "x": x, "y": y, "ts": ts}, "ts.synchronize()"


def _ctypes_row(ctx):
    import ctypes
    path = ctx.bc.driver_path()
    lib = ctypes.WinDLL(path) if sys.platform == "win32" else ctypes.CDLL(path)
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    sync = lib.cuStreamSynchronize
    sync.restype = ctypes.c_int
    sync.argtypes = [ctypes.c_void_p]
    f, st, p = ctx.raw_fn[K4], ctx.raw_stream, ctx.raw_params[K4].address
    rc = fn(f, 1, 1, 1, 1, 1, 1, 0, st, p, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernel returned {rc}")
    sync(st)
    return ("launch(f, 1, 1, 1, 1, 1, 1, 0, st, p, None)",
            {"launch": fn, "sync": sync, "f": f, "st": st, "p": p}, "sync(st)")


LAUNCH_PEERS = [
    ("cucore", "cuda.core launch(), 4 args", _cuda_core_row),
    ("cubind", "cuda.bindings driver.cuLaunchKernel, pre-packed", _cuda_bindings_row),
    ("cupy", "CuPy RawModule function call, 4 args", _cupy_row),
    ("torch", "PyTorch torch.add(a, b, out=c), 1 element", _torch_row),
    ("triton", "Triton @triton.jit kernel, 4 args", _triton_row),
    ("ctypes", "ctypes cuLaunchKernel, pre-packed", _ctypes_row),
]


def launch_rows(ctx):
    """One launch row per peer, each a ratio to raw C with 4 arguments."""
    rows = []
    for key, label, build in LAUNCH_PEERS:
        try:
            stmt, ns, sync = build(ctx)
            rows.append(py_row(key, label, stmt, ns, sync, ref="raw4"))
        except Exception as e:   # noqa: BLE001 -- a peer that cannot run is an n/a row
            r = Row(key, label, "raw4")
            r.mark_na(not_installed(e))
            rows.append(r)
    return rows


# ------------------------------------------------------------------ memory
def _cupy_alloc(ctx, size):
    import cupy
    versions["cupy"] = cupy.__version__
    return f"alloc({size})", {"alloc": cupy.cuda.alloc}


def _torch_empty(ctx, size):
    torch = _torch_cuda()
    dev = torch.device("cuda")
    return f"empty({size}, dtype=u8, device=dev)", {"empty": torch.empty, "u8": torch.uint8, "dev": dev}


def _cuda_core_alloc(ctx, size):
    cc = _cuda_core()
    dev = cc.Device(0)
    dev.set_current()
    st = dev.create_stream()
    ctx.keep.append(st)
    return f"dev.allocate({size}, stream=st).close()", {"dev": dev, "st": st}


# (key, label, build(ctx, size) -> (stmt, ns)): allocate + drop, per pair
ALLOC_PEERS = [
    ("cupypool", "CuPy pool: cupy.cuda.alloc + drop", _cupy_alloc),
    ("torchempty", "PyTorch torch.empty + drop", _torch_empty),
    ("cucoreall", "cuda.core Device.allocate + close", _cuda_core_alloc),
]


def _cupy_h2d(ctx, src, state):
    import cupy
    versions["cupy"] = cupy.__version__
    return timed_to_sync(ctx.B, lambda: cupy.asarray(src))


def _cupy_d2h(ctx, src, state):
    import cupy
    state["cupy"] = a = cupy.asarray(src)
    return timed_to_sync(ctx.B, lambda: a.get())


def _torch_src(src, state):
    torch = _torch_cuda()
    if "tsrc" not in state:
        state["tsrc"] = torch.from_numpy(src)
    return state["tsrc"]


def _torch_h2d(ctx, src, state):
    t = _torch_src(src, state)
    return timed_to_sync(ctx.B, lambda: t.cuda())


def _torch_d2h(ctx, src, state):
    state["tdev"] = d = _torch_src(src, state).cuda()
    return timed_to_sync(ctx.B, lambda: d.cpu())


def _torch_pin_h2d(ctx, src, state):
    t = _torch_src(src, state)
    if "tpin" not in state:
        state["tpin"] = t.pin_memory()
    p = state["tpin"]
    return timed_to_sync(ctx.B, lambda: p.cuda(non_blocking=True))


# (key, label, direction, ref, build(ctx, numpy source, state dict) -> once() ns)
COPY_PEERS = [
    ("cupy_h2d", "CuPy cupy.asarray(numpy), pageable", "H2D", "rawh2d_page", _cupy_h2d),
    ("cupy_d2h", "CuPy array.get(), pageable", "D2H", "rawd2h_page", _cupy_d2h),
    ("torch_h2d", "PyTorch tensor.cuda(), pageable", "H2D", "rawh2d_page", _torch_h2d),
    ("torch_h2d_pin", "PyTorch pinned tensor.cuda()", "H2D", "rawh2d_page", _torch_pin_h2d),
    ("torch_d2h", "PyTorch tensor.cpu(), pageable", "D2H", "rawd2h_page", _torch_d2h),
]
