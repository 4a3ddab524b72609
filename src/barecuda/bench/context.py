"""The benchmark context: kernels, buffers and streams every rows module measures with.

Owns: the names of the kernels (0, 4 and 16 parameters; their PTX is in
barecuda/_ptx_samples.py), their argument values, the
``Settings`` of a run, and ``Context``: the raw objects (driver-only, made by
``_baseline``) and the barecuda objects, built once per run and handed to every
rows module's section functions as ``ctx``.
"""
import struct
from typing import Any

from barecuda import _ptx_samples
from barecuda.bench.harness import why

__all__ = ["PTX", "K0", "K4", "K4P", "K16", "K4_N", "K4_X", "K16_SIG", "Settings", "Context", "pack_k4", "pack_k16"]

# Hand-written PTX (barecuda/_ptx_samples.py). Each kernel does almost nothing (one thread
# writes one value) so that the CPU cost of issuing the launch dominates.
PTX = _ptx_samples.BENCH_KERNELS

K0, K4, K16 = "bc_k0", "bc_k4", "bc_k16"
K4P = "bc_k4p"          # four pointers: out = a * b + c (the tensors-on-the-fast-path rows)

# Argument values. Pointers are filled in per library; the scalars are the same
# everywhere (and their bytes are what the raw C rows pre-pack).
K4_N, K4_X = 7, 1.5
# (kind, value) for the 16-parameter kernel: "p" pointer, else a struct format.
K16_SIG = [("p", None), ("I", 3), ("f", 1.5), ("p", None), ("i", -4), ("d", 2.25),
           ("p", None), ("Q", 123456789), ("I", 5), ("f", 0.5), ("p", None),
           ("q", -987654321), ("f", 0.25), ("I", 9), ("p", None), ("d", 3.5)]


class Settings:
    """How long a run measures: ``quick`` for a rough look in seconds, ``rounds`` of
    the alternated launch rows, ``peers`` to include the installed peers' rows."""

    def __init__(self, quick=False, rounds=None, peers=True):
        self.quick = quick
        self.peers = peers
        self.rounds = rounds or (6 if quick else 30)
        self.batches = 3 if quick else 10        # batches of BATCH launches per row per round
        self.thr_n = 500 if quick else 2000       # throughput: launches then one sync
        self.rt_n = 10 if quick else 30           # round trips per row per round
        self.thread_launches = 2000 if quick else 5000   # per thread
        self.thread_reps = 2 if quick else 5
        self.alloc_check_n = 100_000
        self.mem_rounds = 4 if quick else 15
        self.mem_batches = 3 if quick else 5
        self.copy_bytes = 256 << 20
        self.copy_rounds = 3 if quick else 9

    def as_dict(self):
        return dict(vars(self))


class Context:
    """Kernels, buffers and streams, raw and barecuda; built once per run.

    Attributes a rows module may use: ``bc`` (the barecuda package), ``B`` (the
    ``_baseline`` module: raw C loops and the clock), ``dev``, ``raw_fn[name]``,
    ``raw_params[name]``, ``raw_stream``, ``stream``, ``bufs`` (six 1024-float
    buffers), ``kern[name]``, ``bc_error``/``mem_error``/``launch_error`` (why the
    barecuda objects could not be made, else None), ``keep`` (a list whose items
    live until ``close()``), ``settings``, ``extra`` (a dict rows modules may fill
    for the JSON's ``env``).
    """

    bc: Any = None          # set by __init__ (declared here for type checkers)
    B: Any = None

    def __init__(self, settings=None):
        import barecuda as bc
        from barecuda.bench import _baseline
        self.bc = bc
        self.B = _baseline
        self.settings = settings or Settings()
        self.keep = []
        self.extra = {}
        self.ptx = PTX.encode()
        self.dev = bc.Device(0)
        self.dev.set_current()
        _baseline.use_device(0)
        # raw: nothing but the driver
        self.raw_mod = _baseline.module_load(self.ptx)
        self.raw_fn = {k: _baseline.module_get_function(self.raw_mod, k) for k in (K0, K4, K4P, K16)}
        self.raw_stream = _baseline.stream_create()
        self.raw_ptrs = [_baseline.mem_alloc(4096) for _ in range(6)]
        p = self.raw_ptrs
        self.raw_params = {
            K0: _baseline.ParamBlock(()),
            K4: _baseline.ParamBlock(pack_k4(p[0], p[1])),
            K4P: _baseline.ParamBlock([struct.pack("<Q", x) for x in p[0:4]]),
            K16: _baseline.ParamBlock(pack_k16(p[0:5])),
        }
        # barecuda objects; what fails leaves its rows n/a with the reason
        self.kern, self.bufs, self.stream = {}, [], None
        self.mem_error = self.launch_error = None
        try:
            self.stream = bc.Stream()
            self.bufs = [bc.empty(1024, "float32") for _ in range(6)]
        except Exception as e:   # noqa: BLE001
            self.mem_error = why(e)
        try:
            self.module = bc.Module.from_ptx(PTX)
            self.kern = {k: self.module.get_kernel(k) for k in (K0, K4, K4P, K16)}
        except Exception as e:   # noqa: BLE001
            self.launch_error = why(e)
        self.bc_error = self.mem_error or self.launch_error

    def k4_args(self):
        return (self.bufs[0], self.bufs[1], K4_N, K4_X)

    def k16_args(self):
        it = iter(self.bufs)
        return tuple(next(it) if kind == "p" else v for kind, v in K16_SIG)

    def close(self):
        """Free the raw objects (the barecuda ones go with their last reference).
        A second call does nothing."""
        B = self.B
        if self.raw_mod is None:
            return
        try:
            B.ctx_sync()
        except Exception:   # noqa: BLE001 -- teardown of a benchmark; the process exits next
            pass
        self.keep.clear()      # peers' objects and raw copy buffers (memory_rows._Freed)
        try:
            for p in self.raw_ptrs:
                B.mem_free(p)
            B.stream_destroy(self.raw_stream)
            B.module_unload(self.raw_mod)
        except Exception:   # noqa: BLE001 -- teardown of a benchmark; the process exits next
            pass
        self.raw_ptrs, self.raw_stream, self.raw_mod = [], None, None


def pack_k4(out_ptr, in_ptr):
    """The 4-argument kernel's parameter bytes, as the raw C rows pre-pack them."""
    return [struct.pack("<Q", out_ptr), struct.pack("<Q", in_ptr),
            struct.pack("<I", K4_N), struct.pack("<f", K4_X)]


def pack_k16(ptrs):
    """The 16-argument kernel's parameter bytes (five pointers from ``ptrs``)."""
    it = iter(ptrs)
    return [struct.pack("<Q", next(it)) if kind == "p" else struct.pack("<" + kind, v) for kind, v in K16_SIG]
