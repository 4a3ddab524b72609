"""Which reader the tensors of this machine's torch and CuPy take, and what each costs.

    python3 bench/probes/tensor_paths_gpu.py [--n 20000] [--rounds 7]      (a GPU, torch/CuPy with CUDA)

For the lead's GPU runs beside the benchmark's tensor rows (torch4p, cupy4p): prints
the path barecuda takes for each library (torch: DLPack's C exchange API or the
methods; CuPy: its C current-stream function or a Python call per launch), then ns per
``kernel.launch`` of the 4-pointer kernel with 4 int addresses, 4 DeviceBuffers, 4 torch
tensors and 4 CuPy arrays, each on the library's own current stream (as the benchmark
rows: the tensors come from the benchmark's own helpers, barecuda.bench.peers), median
of alternated rounds. tensors minus ints = what reading 4 tensors costs. Each library
also gets the launch split in two: its tensors on a barecuda Stream wrapping its
stream's handle, and 4 DeviceBuffers on its stream object (what the foreign stream
costs).
"""
import argparse
import statistics
import sys
import time
from types import SimpleNamespace


def _torch_path():
    import torch
    dlx = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    return f"torch {torch.__version__}: {'DLPack C exchange API' if dlx else 'methods (data_ptr/get_device)'}"


def _cupy_path():
    import ctypes
    import cupy
    capi = getattr(cupy.cuda.stream, "__pyx_capi__", {}).get("get_current_stream_ptr")
    name = None
    if capi is not None:
        get = ctypes.pythonapi.PyCapsule_GetName
        get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
        name = get(capi)
    return (f"cupy {cupy.__version__}: current stream through "
            f"{'its C function' if name == b'intptr_t (void)' else 'Python'} (capsule name {name!r}); "
            f"ndarray.data is {type(vars(cupy._core.core._ndarray_base).get('data')).__name__}")


def _loop(f, n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
    return (time.perf_counter_ns() - t0) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    import barecuda as bc
    from barecuda.bench import peers
    from barecuda.bench.context import PTX, K4P
    k = bc.Module.from_ptx(PTX).get_kernel(K4P)
    rows = {}
    bufs = [bc.alloc(4096) for _ in range(4)]
    s = bc.Stream()
    ints = [b.ptr for b in bufs]
    rows["4 int addresses"] = (lambda: k.launch(1, 1, *ints, stream=s), s.synchronize, None, None)
    rows["4 DeviceBuffers"] = (lambda: k.launch(1, 1, *bufs, stream=s), s.synchronize, None, None)
    nb = bc.Stream(non_blocking=True)
    rows["4 DeviceBuffers, non-blocking"] = (lambda: k.launch(1, 1, *bufs, stream=nb), nb.synchronize, None, None)
    ctx = SimpleNamespace(keep=[])      # what the benchmark's context keeps alive (peers' helpers add to it)
    for key, make, path in (("4 torch tensors", peers.torch_tensor_args, _torch_path),
                            ("4 CuPy arrays", peers.cupy_array_args, _cupy_path)):
        try:
            args, st, _, setup, teardown = make(ctx)
            print(path())
        except Exception as e:   # noqa: BLE001 -- a missing library is a missing row
            print(f"{key.split()[1]}: n/a ({type(e).__name__}: {e})")
            continue
        rows[key] = (lambda args=args, st=st: k.launch(1, 1, *args, stream=st), st.synchronize, setup, teardown)
        # the same launch split in two: the library's stream object (a foreign stream,
        # read through the 8-slot table) against a barecuda Stream wrapping its handle,
        # with 4 DeviceBuffers and with the library's tensors
        bst = bc.Stream.from_handle(st)
        rows[f"{key}, bc Stream"] = (lambda args=args, bst=bst: k.launch(1, 1, *args, stream=bst), st.synchronize,
                                     setup, teardown)
        rows[f"4 DeviceBuffers, {key.split()[1]} stream"] = (
            lambda st=st: k.launch(1, 1, *bufs, stream=st), st.synchronize, setup, teardown)
    got = {key: [] for key in rows}
    for _ in range(a.rounds):
        for key, (f, sync, setup, teardown) in rows.items():
            if setup:
                setup()
            try:
                f()
                sync()
                got[key].append(_loop(f, a.n))
                sync()
            finally:
                if teardown:
                    teardown()
    base = statistics.median(got["4 int addresses"])
    print(f"kernel.launch, 4-pointer kernel, ns per launch (median of {a.rounds} alternated rounds of {a.n:,})")
    for key, v in got.items():
        m = statistics.median(v)
        print(f"  {key:34s} {m:8.0f}   {m - base:+7.0f} over ints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
