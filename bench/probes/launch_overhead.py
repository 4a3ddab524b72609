"""barecuda's own overhead per launch, measured against the driver double (no GPU).

    PYTHONPATH=src python3 bench/probes/launch_overhead.py [--n 200000] [--repeats 7] [--alloc]

The double (tests/fakecuda) makes every driver call nearly free, so the time of a
``kernel.launch`` against it is (almost) barecuda's own work: argument packing, the
geometry checks, the stream and tensor reading. The rows mirror the launch rows of the
benchmark (``python -m barecuda.bench``) with the same kernels, arguments and forms, and
each is printed beside the raw C loop (barecuda.bench._baseline.launch_loop) of the same
kernel on the double. These are "ns of overhead on the double", never GPU figures.

The torch row needs torch (a CPU build is enough): its (exact torch.Tensor) tensors are
read through torch's own DLPack C exchange API, wrapped by a small C shim compiled here
that rewrites the DLTensor's device to CUDA device 0 and gives the launch stream as the
current stream, so the row measures torch's conversion plus barecuda's reader, as on the
GPU. The dlx4p row is the same shim without torch (barecuda's side alone). The CuPy-shaped row uses a
stand-in class named ``cupy.ndarray`` (the attributes barecuda reads: ``.data.ptr`` and
``.data.device_id``) and a stand-in ``cupy`` module for its current stream.

``--alloc`` also runs the benchmark's allocation probe on 100,000 launches of each row
(``sys.getallocatedblocks`` and tracemalloc, minus the same loop over a no-op).
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench/probes/ -> the repository
sys.path.insert(0, os.path.join(REPO, "tests"))

_SHIM = r"""
#include <string.h>
#include "barecuda/bc_dlpack.h"
static bc_dlpack_exchange_api api;
static const bc_dlpack_exchange_api *inner;
static void *current;
static int stub;
static int64_t shape[1] = {16};
static int dltensor(void *obj, DLTensor *out) {
    int rc = 0;
    if (stub) {   /* barecuda's side alone: a DLTensor without asking torch */
        memset(out, 0, sizeof(*out));
        out->data = obj; out->ndim = 1; out->shape = shape;
        out->dtype.code = 2; out->dtype.bits = 32; out->dtype.lanes = 1;
    } else {
        rc = inner->dltensor_from_py_object_no_sync(obj, out);
    }
    if (rc == 0) { out->device.device_type = kDLCUDA; out->device.device_id = 0; }
    return rc;
}
static int stream(int32_t device_type, int32_t device_id, void **out) {
    (void)device_type; (void)device_id;
    *out = current;
    return 0;
}
void *shim_init(const bc_dlpack_exchange_api *torch_api, void *stream_handle, int stub_) {
    inner = torch_api;
    stub = stub_;
    api = *torch_api;
    api.dltensor_from_py_object_no_sync = dltensor;
    api.current_work_stream = stream;
    current = stream_handle;
    return &api;
}
"""


def _fake_driver():
    import conftest          # builds the double when it is out of date
    if conftest._BUILD_ERROR:
        sys.exit(f"could not build the driver double:\n{conftest._BUILD_ERROR}")
    os.environ["BARECUDA_LIBCUDA"] = conftest.FAKE_LIB


def _exchange_capsule(stream_handle, stub):
    """A capsule of the shim's exchange API (see the module docstring): torch's with the
    device rewritten, or (stub) a made-up DLTensor without torch. None without torch."""
    try:
        import torch
    except ImportError:
        return None
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    torch_api = get(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    tmp = tempfile.mkdtemp(prefix="bc_overhead_")
    src, lib = os.path.join(tmp, "shim.c"), os.path.join(tmp, "shim.so")
    with open(src, "w") as f:
        f.write(_SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-I", os.path.join(REPO, "include"), src, "-o", lib],
                   check=True)
    shim = ctypes.CDLL(lib)
    shim.shim_init.restype = ctypes.c_void_p
    shim.shim_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    api = shim.shim_init(torch_api, stream_handle, stub)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    name = ctypes.create_string_buffer(b"dlpack_exchange_api")
    _KEEP.append((shim, name))
    return new(api, ctypes.addressof(name), None)


_KEEP = []


def _torch_cuda(stream_handle):
    """torch, with torch.Tensor's exchange API replaced by the shim's (exact torch.Tensor
    objects, as in the benchmark), or None without torch."""
    cap = _exchange_capsule(stream_handle, stub=False)
    if cap is None:
        return None
    import torch
    torch.Tensor.__dlpack_c_exchange_api__ = cap      # this process only
    return torch


def _dlx_stub_class(stream_handle):
    """A class publishing the shim's exchange API with torch left out (a DLTensor made
    up in C): barecuda's side of the tensor row alone."""
    cap = _exchange_capsule(stream_handle, stub=True)
    if cap is None:
        return None

    class Stub:
        __dlpack_c_exchange_api__ = cap
    return Stub


def _cupy_class(stream_handle):
    mod = types.ModuleType("cupy")
    mod.cuda = types.SimpleNamespace(stream=types.SimpleNamespace(get_current_stream_ptr=lambda: stream_handle))
    sys.modules["cupy"] = mod

    class MemoryPointer:
        __slots__ = ("ptr", "device_id")

        def __init__(self, ptr, device_id):
            self.ptr, self.device_id = ptr, device_id

    class ndarray:
        __slots__ = ("data",)

        def __init__(self, ptr):
            self.data = MemoryPointer(ptr, 0)
    ndarray.__module__, ndarray.__qualname__ = "cupy", "ndarray"
    mod.ndarray = ndarray                   # the class the stand-in module holds (read as CuPy's)
    return ndarray


def _time(f, n, repeats):
    """Median over `repeats` of the ns per call of f() in a loop of n."""
    out = []
    rng = range(n)
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in rng:
            f()
        out.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(out)


def _alloc_blocks(f, n=100_000):
    """The benchmark's allocation probe (barecuda.bench.launch_rows._alloc_probe: blocks
    growth, traced growth, traced peak, new traced blocks) over n calls of f, minus the
    same for a no-op."""
    from barecuda.bench.launch_rows import _alloc_probe

    def loop(g):
        def go():
            for _ in range(n):
                g()
        return go
    got = _alloc_probe(loop(f))
    ctl = _alloc_probe(loop(lambda: None))
    return tuple(a - b for a, b in zip(got, ctl))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--alloc", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated row keys")
    ap.add_argument("--loop", metavar="KEY", help="only run row KEY --n times, untimed (for callgrind: see "
                    "bench/probes/launch_instructions.sh)")
    a = ap.parse_args(argv)
    _fake_driver()
    import barecuda as bc
    from barecuda.bench import _baseline as B
    from barecuda.bench.context import PTX, K0, K4, K4P, K16, K4_N, K4_X, K16_SIG, pack_k4, pack_k16

    mod = bc.Module.from_ptx(PTX)
    k0, k4, k4p, k16 = (mod.get_kernel(n) for n in (K0, K4, K4P, K16))
    s = bc.Stream()
    bufs = [bc.alloc(4096) for _ in range(8)]
    need_torch = not a.loop or a.loop in ("torch4p", "dlx4p", "floortorch4p", "floordlx4p")
    torch = _torch_cuda(s.handle_int) if need_torch else None
    ndarray = _cupy_class(s.handle_int)
    it = iter(bufs)
    a16 = tuple(next(it) if kind == "p" else v for kind, v in K16_SIG)
    ptrs = [b.ptr for b in bufs]

    def raw(k, blobs):
        p = B.ParamBlock(blobs)
        return lambda: B.launch_loop(k.handle_int, 1, 1, p, s.handle_int, a.n)

    z8 = [b"\0" * 8] * 4
    raws = {
        "raw0": raw(k0, []),
        "raw4": raw(k4, pack_k4(ptrs[0], ptrs[1])),
        "raw4p": raw(k4p, z8),
        "raw16": raw(k16, pack_k16(ptrs)),
    }
    L0, L4, L4P, L16 = k0.launch, k4.launch, k4p.launch, k16.launch
    b0, b1, b2, b3 = bufs[:4]
    rows = [
        ("bc0", "kernel.launch, 0 args", "raw0", lambda: L0(1, 1, stream=s)),
        ("bc4", "kernel.launch, 4 args", "raw4", lambda: L4(1, 1, b0, b1, K4_N, K4_X, stream=s)),
        ("bc4p", "kernel.launch, 4 DeviceBuffers", "raw4p", lambda: L4P(1, 1, b0, b1, b2, b3, stream=s)),
    ]
    if torch is not None:
        ts = [torch.ones(16) for _ in range(4)]
        t0, t1, t2, t3 = ts
        rows.append(("torch4p", "kernel.launch, 4 torch tensors", "raw4p", lambda: L4P(1, 1, t0, t1, t2, t3, stream=s)))
        Stub = _dlx_stub_class(s.handle_int)
        x0, x1, x2, x3 = (Stub() for _ in range(4))
        rows.append(("dlx4p", "kernel.launch, 4 exchange-API stubs", "raw4p", lambda: L4P(1, 1, x0, x1, x2, x3, stream=s)))
    # the floors of the benchmark (bench/_baseline.LaunchFloor): the same call on a C
    # method doing only the raw launch, or the tensors' exchange-API reads + the launch
    FL = B.LaunchFloor(k4p.handle_int, 1, 1, B.ParamBlock(z8), s.handle_int).launch
    rows.append(("floor4p", "floor: the same call making the raw launch", "raw4p",
                 lambda: FL(1, 1, b0, b1, b2, b3, stream=s)))
    if torch is not None:
        FLT = B.LaunchFloor(k4p.handle_int, 1, 1, B.ParamBlock(z8), s.handle_int, ts).launch
        rows.append(("floortorch4p", "floor: the same call making torch's reads + the raw launch", "raw4p",
                     lambda: FLT(1, 1, t0, t1, t2, t3, stream=s)))
        FLX = B.LaunchFloor(k4p.handle_int, 1, 1, B.ParamBlock(z8), s.handle_int, [x0, x1, x2, x3]).launch
        rows.append(("floordlx4p", "floor: the same call making the stubs' reads + the raw launch", "raw4p",
                     lambda: FLX(1, 1, x0, x1, x2, x3, stream=s)))
    c0, c1, c2, c3 = (ndarray(p) for p in ptrs[:4])
    rows.append(("cupy4p", "kernel.launch, 4 cupy-shaped arrays", "raw4p", lambda: L4P(1, 1, c0, c1, c2, c3, stream=s)))
    # as the benchmark writes it: scalars as literals, a call with a keyword (no *args)
    ns16 = {"L16": L16, "s": s}
    ns16.update({f"a{i}": v for i, v in enumerate(a16) if not isinstance(v, (int, float))})
    lit = ", ".join(f"a{i}" if f"a{i}" in ns16 else repr(v) for i, v in enumerate(a16))
    rows.append(("bc16", "kernel.launch, 16 args", "raw16", eval(f"lambda: L16(1, 1, {lit}, stream=s)", ns16)))
    p4 = k4.bind(1, 1, b0, b1, K4_N, K4_X, stream=s)
    rows.append(("plan4", "plan(), 4 args", "raw4", p4))
    # ExecKernelNode.set_arg of an int slot (the graph benchmark's set_arg row, against
    # raw4: the double makes cuGraphExecKernelNodeSetParams about as cheap as a launch)
    g = bc.Graph()
    node = g.add_kernel(k16, 1, 1, *a16)
    h = g.instantiate().kernel_node(node)
    SA = h.set_arg
    rows.append(("setarg", "ExecKernelNode.set_arg(1, int)", "raw4", lambda: SA(1, 5)))
    if a.loop:
        f = {key: f for key, _, _, f in rows}[a.loop]
        for _ in range(a.n):
            f()
        s.synchronize()
        return 0
    only = set(filter(None, a.only.split(",")))
    rawns = {}
    print(f"overhead on the driver double, ns per launch (median of {a.repeats} x {a.n:,}); "
          f"Python {sys.version.split()[0]}, torch {getattr(torch, '__version__', 'absent')}")
    for key, f in raws.items():
        if f is None:
            continue
        ns = []
        for _ in range(a.repeats):
            ns.append(f() / a.n)
        rawns[key] = statistics.median(ns)
    for key, label, ref, f in rows:
        if only and key not in only:
            continue
        f()
        ns = _time(f, a.n, a.repeats)
        extra = ("  alloc: blocks %+d, traced %+d B, peak %+d B, new blocks %+d" % _alloc_blocks(f)) if a.alloc else ""
        print(f"  {key:8s} {label:38s} {ns:8.1f}   ({ns - rawns[ref]:+7.1f} over raw C {rawns[ref]:.1f}){extra}")
    s.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
