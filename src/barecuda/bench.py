"""Launch and memory benchmark: ``python -m barecuda.bench``.

Measures the CPU cost of launching a CUDA kernel from Python with barecuda, next to
a raw C loop calling the same driver entry point with a pre-packed argument array
(``barecuda._bench``), and next to the peers that are installed (cuda.core,
cuda.bindings, CuPy, PyTorch, Triton, ctypes). Also allocation/free of 1 MiB and
host<->device copy bandwidth of 256 MiB.

Method
------
* One clock for everything: ``barecuda._bench.now_ns`` (CLOCK_MONOTONIC /
  QueryPerformanceCounter), read in C around C loops and from Python around Python
  loops. A Python row is the statement a user would write, run in a compiled loop
  (like ``timeit``), so it includes the interpreter's cost of making the call.
* Columns: *issue* -- CPU cost per asynchronous launch, median over batches of 100
  launches (the launch queue holds ~2,250, so it never fills; the sync after each
  batch is not timed); *thr* -- N launches then one sync, per launch; *rt* -- one
  launch + stream synchronize. Each also as a ratio to the raw C row of the same
  run (``x``), computed round by round and then the median taken.
* Rows are alternated (round 1: A B C ..., round 2: A B C ...) so that drift of
  the machine hits every row alike; figures are medians across rounds.
* Absolute times differ between machines (and VM instances) by a third: only the
  ratios within one run mean anything.

Options: ``--quick`` (fewer rounds), ``--rows launch,threads,alloccheck,memory``
(``memory`` = ``alloc`` + ``copy``), ``--json out.json`` (everything, with the
environment), ``--rounds N``.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import struct
import sys
import tempfile
import threading
import time
import tracemalloc
from itertools import repeat

# ---------------------------------------------------------------- kernels
# Hand-written PTX. Each kernel does almost nothing (one thread writes one value) so
# that the CPU cost of issuing the launch dominates.
PTX = r"""
.version 8.0
.target sm_52
.address_size 64

.visible .entry bc_k0()
{
    ret;
}

.visible .entry bc_k4(
    .param .u64 bc_k4_out,
    .param .u64 bc_k4_in,
    .param .u32 bc_k4_n,
    .param .f32 bc_k4_x
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    or.b32 %r3, %r1, %r2;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra $L_k4_done;
    ld.param.u64 %rd1, [bc_k4_out];
    ld.param.u64 %rd2, [bc_k4_in];
    ld.param.u32 %r1, [bc_k4_n];
    ld.param.f32 %f1, [bc_k4_x];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    ld.global.f32 %f2, [%rd4];
    cvt.rn.f32.u32 %f3, %r1;
    fma.rn.f32 %f2, %f2, %f1, %f3;
    st.global.f32 [%rd3], %f2;
$L_k4_done:
    ret;
}

.visible .entry bc_k16(
    .param .u64 bc_k16_p0,
    .param .u32 bc_k16_a1,
    .param .f32 bc_k16_a2,
    .param .u64 bc_k16_p3,
    .param .s32 bc_k16_a4,
    .param .f64 bc_k16_a5,
    .param .u64 bc_k16_p6,
    .param .u64 bc_k16_a7,
    .param .u32 bc_k16_a8,
    .param .f32 bc_k16_a9,
    .param .u64 bc_k16_p10,
    .param .s64 bc_k16_a11,
    .param .f32 bc_k16_a12,
    .param .u32 bc_k16_a13,
    .param .u64 bc_k16_p14,
    .param .f64 bc_k16_a15
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    or.b32 %r3, %r1, %r2;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra $L_k16_done;
    ld.param.u64 %rd1, [bc_k16_p0];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.u32 %r1, [bc_k16_a1];
    ld.param.u32 %r2, [bc_k16_a8];
    ld.param.u32 %r4, [bc_k16_a13];
    add.u32 %r5, %r1, %r2;
    add.u32 %r5, %r5, %r4;
    st.global.u32 [%rd2], %r5;
$L_k16_done:
    ret;
}
"""

K0, K4, K16 = "bc_k0", "bc_k4", "bc_k16"

# Argument values. Pointers are filled in per library; the scalars are the same
# everywhere (and their bytes are what the raw C rows pre-pack).
K4_N, K4_X = 7, 1.5
# (kind, value) for the 16-parameter kernel: "p" pointer, else a struct format.
K16_SIG = [("p", None), ("I", 3), ("f", 1.5), ("p", None), ("i", -4), ("d", 2.25),
           ("p", None), ("Q", 123456789), ("I", 5), ("f", 0.5), ("p", None),
           ("q", -987654321), ("f", 0.25), ("I", 9), ("p", None), ("d", 3.5)]

BATCH = 100           # launches per timed batch (well below the ~2,250-deep launch queue)


class Settings:
    def __init__(self, quick=False, rounds=None):
        self.quick = quick
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


# ---------------------------------------------------------------- helpers
def _median(xs):
    return statistics.median(xs) if xs else None


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


class NotAvailable(Exception):
    """A row cannot run; the message is the reason shown in the table."""


def _why(exc):
    if isinstance(exc, NotAvailable):
        return str(exc)
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:110]


_TEMPLATE = """
def _issue(_nb, _execs, {args}):
    _clock = _clock_g
    _out = []
    for _ in _repeat(None, _nb):
        _t0 = _clock()
        for _ in _repeat(None, _execs):
            {stmt}
        _t1 = _clock()
        {sync}
        _out.append(_t1 - _t0)
    return _out

def _thr(_execs, {args}):
    _clock = _clock_g
    _t0 = _clock()
    for _ in _repeat(None, _execs):
        {stmt}
    {sync}
    return _clock() - _t0

def _rt(_n, {args}):
    _clock = _clock_g
    _out = []
    for _ in _repeat(None, _n):
        _t0 = _clock()
        {stmt}
        {sync}
        _out.append(_clock() - _t0)
    return _out

def _run(_execs, {args}):
    for _ in _repeat(None, _execs):
        {stmt}

def _sync({args}):
    {sync}

def _chunks(_reps, _chunk, {args}):
    for _ in _repeat(None, _reps):
        for _ in _repeat(None, _chunk):
            {stmt}
        {sync}
"""


def compile_loops(stmt, ns, sync="pass"):
    """Compile timing loops for one Python statement, as timeit does: the names in
    ``ns`` become local variables, so the loop body is exactly ``stmt``.
    Returns a dict of functions issue(nb, execs), thr(execs), rt(n), run(execs), sync()."""
    from barecuda import _bench
    names = sorted(ns)
    src = _TEMPLATE.format(args=", ".join(names) if names else "", stmt=stmt, sync=sync)
    src = (src.replace("(_nb, _execs, )", "(_nb, _execs)").replace("(_execs, )", "(_execs)")
           .replace("(_n, )", "(_n)").replace("_sync(, )", "_sync()"))
    g = {"_clock_g": _bench.now_ns, "_repeat": repeat}
    exec(compile(src, f"<bench: {stmt}>", "exec"), g)
    bind = lambda f: (lambda *a: f(*a, **ns))  # noqa: E731 -- one call per loop, not per iteration
    return {k: bind(g["_" + k]) for k in ("issue", "thr", "rt", "run", "sync", "chunks")}


# ---------------------------------------------------------------- rows
class Row:
    """One line of the launch table. ``issue(nb, bs)`` -> per-launch ns of each batch;
    ``thr(n)`` -> per-launch ns; ``rt(n)`` -> list of round-trip ns; any may be None."""

    def __init__(self, key, label, ref=None, section="launch", per=1, note=""):
        self.key, self.label, self.ref, self.section, self.per, self.note = key, label, ref, section, per, note
        self.issue = self.thr = self.rt = self.run = self.sync = None
        self.na = None
        self.stmt = None
        self.samples = {"issue": [], "thr": [], "rt": []}

    def mark_na(self, reason):
        self.na = reason
        self.issue = self.thr = self.rt = self.run = None

    def result(self):
        return {k: _median(v) for k, v in self.samples.items()}


def c_row(key, label, fn, grid, block, params, stream, ref=None, ex=None, note=""):
    from barecuda import _bench
    r = Row(key, label, ref, note=note)
    r.stmt = f"C loop: {'cuLaunchKernelEx' if ex else 'cuLaunchKernel'} with a pre-packed void**"
    r.issue = lambda nb, bs: [t / bs for t in _bench.launch_batches(fn, grid, block, params, stream, nb, bs, ex=ex)]
    r.thr = lambda n: _bench.launch_throughput(fn, grid, block, params, stream, n, ex=ex) / n
    r.rt = lambda n: _bench.launch_roundtrip(fn, grid, block, params, stream, n, ex=ex)
    r.run = lambda n: _bench.launch_loop(fn, grid, block, params, stream, n, ex=ex)
    r.sync = lambda: _bench.stream_sync(stream)
    return r


def py_row(key, label, stmt, ns, sync, ref=None, per=1, roundtrip=True, note=""):
    r = Row(key, label, ref, per=per, note=note)
    r.stmt = stmt
    loops = compile_loops(stmt, ns, sync)
    r.issue = lambda nb, bs: [t / (max(1, bs // per) * per) for t in loops["issue"](nb, max(1, bs // per))]
    r.thr = lambda n: loops["thr"](max(1, n // per)) / (max(1, n // per) * per)
    r.rt = loops["rt"] if roundtrip else None
    r.run = lambda n: loops["run"](max(1, n // per))
    r.sync = loops["sync"]
    return r


def _check_once(row, sync_fn=None):
    """Run a row once (warm-up: JIT, caches); on failure the row becomes n/a."""
    if row.na:
        return
    try:
        if row.run is not None:
            row.run(BATCH)
        if sync_fn is not None:
            sync_fn()
    except Exception as e:   # noqa: BLE001 -- a row that cannot run is reported, not fatal
        row.mark_na(_why(e))


# ---------------------------------------------------------------- setup
class Setup:
    """Kernels, buffers and streams, raw and barecuda; built once."""

    def __init__(self):
        import barecuda as bc
        from barecuda import _bench
        self.bc = bc
        self.B = _bench
        self.ptx = PTX.encode()
        self.dev = bc.Device(0)
        self.dev.set_current()
        _bench.use_device(0)
        # raw: nothing but the driver
        self.raw_mod = _bench.module_load(self.ptx)
        self.raw_fn = {k: _bench.module_get_function(self.raw_mod, k) for k in (K0, K4, K16)}
        self.raw_stream = _bench.stream_create()
        self.raw_ptrs = [_bench.mem_alloc(4096) for _ in range(6)]
        p = self.raw_ptrs
        self.raw_params = {
            K0: _bench.ParamBlock(()),
            K4: _bench.ParamBlock(pack_k4(p[0], p[1])),
            K16: _bench.ParamBlock(pack_k16(p[0:5])),
        }
        # barecuda objects; what fails leaves its rows n/a with the reason
        self.kern, self.bufs, self.stream = {}, [], None
        self.mem_error = self.launch_error = None
        try:
            self.stream = bc.Stream()
            self.bufs = [bc.empty(1024, "float32") for _ in range(6)]
        except Exception as e:   # noqa: BLE001
            self.mem_error = _why(e)
        try:
            self.module = bc.Module.from_ptx(PTX)
            self.kern = {k: self.module.get_kernel(k) for k in (K0, K4, K16)}
        except Exception as e:   # noqa: BLE001
            self.launch_error = _why(e)
        self.bc_error = self.mem_error or self.launch_error

    def k4_args(self):
        return (self.bufs[0], self.bufs[1], K4_N, K4_X)

    def k16_args(self):
        it = iter(self.bufs)
        return tuple(next(it) if kind == "p" else v for kind, v in K16_SIG)

    def close(self):
        B = self.B
        try:
            B.ctx_sync()
            for p in self.raw_ptrs:
                B.mem_free(p)
            B.stream_destroy(self.raw_stream)
            B.module_unload(self.raw_mod)
        except Exception:   # noqa: BLE001 -- teardown of a benchmark; the process exits next
            pass


def pack_k4(out_ptr, in_ptr):
    return [struct.pack("<Q", out_ptr), struct.pack("<Q", in_ptr),
            struct.pack("<I", K4_N), struct.pack("<f", K4_X)]


def pack_k16(ptrs):
    it = iter(ptrs)
    return [struct.pack("<Q", next(it)) if kind == "p" else struct.pack("<" + kind, v) for kind, v in K16_SIG]


# ---------------------------------------------------------------- launch rows
def find_gil_switch(bc):
    """Whatever the launch module offers to choose GIL release around the launch.
    Returns (description, set(flag) callable or None, restore callable or None)."""
    mods = [bc]
    try:
        import barecuda._launch as L
        mods.append(L)
    except Exception:   # noqa: BLE001
        pass
    names = sorted({f"{m.__name__}.{n}" for m in mods for n in dir(m) if "gil" in n.lower()})
    for m in mods:
        for n in dir(m):
            low = n.lower()
            if "gil" in low and low.startswith("set_") and callable(getattr(m, n)):
                setter = getattr(m, n)
                getter = None
                for g in ("get_" + n[4:], n[4:]):
                    if hasattr(m, g):
                        getter = getattr(m, g)
                old = getter() if callable(getter) else None
                return (f"{m.__name__}.{n}", setter, (lambda: setter(old)) if old is not None else None)
    return ("none found" + (f" (names with 'gil': {', '.join(names)})" if names else ""), None, None)


def find_ex_launch(bc, kern, args, stream):
    """How a LaunchConfig launch is spelled here; returns (stmt, ns) or raises.
    barecuda's form is ``kernel.launch_config(LaunchConfig(grid, block, stream=s,
    priority=0), *args)``; the others are tried so that an API change shows up as a
    clear n/a instead of a crash."""
    s = stream
    try:
        cfg = bc.LaunchConfig(1, 1, stream=s, priority=0)
    except TypeError:
        cfg = bc.LaunchConfig(1, 1, priority=0)
    ns = {"k": kern, "cfg": cfg, "s": s, "bc": bc}
    ns.update({f"a{i}": a for i, a in enumerate(args)})
    argl = ", ".join(f"a{i}" for i in range(len(args)))
    candidates = [
        f"k.launch_config(cfg, {argl})",
        f"k.launch_ex(cfg, {argl})",
        f"k.launch(cfg, {argl}, stream=s)",
    ]
    errors = []
    for stmt in candidates:
        try:
            exec(stmt, {}, dict(ns))
            s.synchronize()
            return stmt, ns
        except Exception as e:   # noqa: BLE001
            errors.append(_why(e))
    raise NotAvailable("no LaunchConfig launch form worked; first error: " + (errors[0] if errors else "?"))


BC_LAUNCH_ROWS = [
    ("bc0", "barecuda kernel.launch, 0 args", "raw0"),
    ("bc4", "barecuda kernel.launch, 4 args", "raw4"),
    ("bc16", "barecuda kernel.launch, 16 args", "raw16"),
    ("plan4", "barecuda plan(), 4 args", "raw4"),
    ("all4", f"barecuda launch_all({BATCH} plans), per launch", "raw4"),
    ("plist4", f"barecuda PlanList({BATCH})(), per launch", "raw4"),
    ("bcex4", "barecuda LaunchConfig(priority) launch, 4 args", "rawex4"),
    ("bcexplan4", "barecuda bind_config(LaunchConfig) plan(), 4 args", "rawex4"),
    ("gilrel4", "barecuda kernel.launch, GIL released, 4 args", "raw4"),
    ("gilheld4", "barecuda kernel.launch, GIL held, 4 args", "raw4"),
]


def build_launch_rows(S, peers_wanted=True):
    rows = []
    B = S.B
    raw_s = S.raw_stream
    for k, nargs in ((K0, 0), (K4, 4), (K16, 16)):
        rows.append(c_row(f"raw{nargs}", f"raw C cuLaunchKernel, {nargs} args", S.raw_fn[k], 1, 1,
                          S.raw_params[k], raw_s))
    ex_attrs = {"priority": 0}
    rows.append(c_row("rawex4", "raw C cuLaunchKernelEx (priority), 4 args", S.raw_fn[K4], 1, 1,
                      S.raw_params[K4], raw_s, ex=ex_attrs))

    bc = S.bc
    s = S.stream

    def na_row(key, label, ref, reason):
        r = Row(key, label, ref)
        r.mark_na(reason)
        return r

    if S.bc_error:
        for key, label, ref in BC_LAUNCH_ROWS:
            rows.append(na_row(key, label, ref, S.bc_error))
    else:
        sync = "s.synchronize()"
        rows.append(py_row("bc0", "barecuda kernel.launch, 0 args", "k.launch(1, 1, stream=s)",
                           {"k": S.kern[K0], "s": s}, sync, ref="raw0"))
        ns4 = {"k": S.kern[K4], "s": s, "o": S.bufs[0], "i": S.bufs[1]}
        rows.append(py_row("bc4", "barecuda kernel.launch, 4 args", "k.launch(1, 1, o, i, 7, 1.5, stream=s)",
                           ns4, sync, ref="raw4"))
        a16 = S.k16_args()
        ns16 = {"k": S.kern[K16], "s": s}
        ns16.update({f"a{i}": a for i, a in enumerate(a16) if not isinstance(a, (int, float))})
        lit = ", ".join(f"a{i}" if f"a{i}" in ns16 else repr(a) for i, a in enumerate(a16))
        rows.append(py_row("bc16", "barecuda kernel.launch, 16 args", f"k.launch(1, 1, {lit}, stream=s)",
                           ns16, sync, ref="raw16"))
        # launch plans
        try:
            plan = S.kern[K4].bind(1, 1, *S.k4_args(), stream=s)
            rows.append(py_row("plan4", "barecuda plan(), 4 args", "p()", {"p": plan, "s": s}, sync, ref="raw4"))
        except Exception as e:   # noqa: BLE001
            rows.append(na_row("plan4", "barecuda plan(), 4 args", "raw4", _why(e)))
        try:
            plans = [S.kern[K4].bind(1, 1, *S.k4_args(), stream=s) for _ in range(BATCH)]
            try:
                la = bc.launch_all
            except AttributeError:
                raise NotAvailable("barecuda.launch_all is missing") from None
            rows.append(py_row("all4", f"barecuda launch_all({BATCH} plans), per launch", "la(plans)",
                               {"la": la, "plans": plans, "s": s}, sync, ref="raw4", per=BATCH, roundtrip=False))
        except Exception as e:   # noqa: BLE001
            rows.append(na_row("all4", f"barecuda launch_all({BATCH} plans), per launch", "raw4", _why(e)))
        try:
            plans = [S.kern[K4].bind(1, 1, *S.k4_args(), stream=s) for _ in range(BATCH)]
            pl = bc.PlanList(plans)
            rows.append(py_row("plist4", f"barecuda PlanList({BATCH})(), per launch", "pl()",
                               {"pl": pl, "s": s}, sync, ref="raw4", per=BATCH, roundtrip=False))
        except Exception as e:   # noqa: BLE001
            rows.append(na_row("plist4", f"barecuda PlanList({BATCH})(), per launch", "raw4", _why(e)))
        # LaunchConfig -> cuLaunchKernelEx
        try:
            stmt, ns = find_ex_launch(bc, S.kern[K4], S.k4_args(), s)
            rows.append(py_row("bcex4", "barecuda LaunchConfig(priority) launch, 4 args", stmt, ns, sync,
                               ref="rawex4"))
        except Exception as e:   # noqa: BLE001
            rows.append(na_row("bcex4", "barecuda LaunchConfig(priority) launch, 4 args", "rawex4", _why(e)))
        try:
            cfg = bc.LaunchConfig(1, 1, stream=s, priority=0)
            xplan = S.kern[K4].bind_config(cfg, *S.k4_args())
            rows.append(py_row("bcexplan4", "barecuda bind_config(LaunchConfig) plan(), 4 args", "p()",
                               {"p": xplan, "s": s}, sync, ref="rawex4"))
        except Exception as e:   # noqa: BLE001
            rows.append(na_row("bcexplan4", "barecuda bind_config(LaunchConfig) plan(), 4 args", "rawex4",
                               _why(e)))
        # GIL released vs held, when the launch module offers the switch
        desc, setter, restore = find_gil_switch(bc)
        S.gil_switch = desc
        for flag in (True, False):
            key = "gilrel4" if flag else "gilheld4"
            label = f"barecuda kernel.launch, GIL {'released' if flag else 'held'}, 4 args"
            if setter is None:
                rows.append(na_row(key, label, "raw4", f"no GIL switch in the launch module ({desc})"))
                continue
            r = py_row(key, label, "k.launch(1, 1, o, i, 7, 1.5, stream=s)", ns4, sync, ref="raw4")
            r.setup = (lambda f=flag: setter(f))
            r.teardown = restore
            rows.append(r)

    if peers_wanted:
        rows.extend(build_peer_rows(S))
    return rows


# ---------------------------------------------------------------- peers
class Peers:
    versions = {}


def build_peer_rows(S):
    rows = []
    for builder in (_cuda_core_row, _cuda_bindings_row, _cupy_row, _torch_row, _triton_row, _ctypes_row):
        key, label = builder.__doc__.split("|")
        try:
            r = builder(S)
            r.key, r.label, r.ref = key.strip(), label.strip(), "raw4"
        except Exception as e:   # noqa: BLE001
            r = Row(key.strip(), label.strip(), "raw4")
            reason = _why(e)
            if isinstance(e, ImportError):
                reason = "not installed (" + reason + ")"
            r.mark_na(reason)
        rows.append(r)
    return rows


def _cuda_core_row(S):
    """cucore | cuda.core launch(), 4 args"""
    import numpy as np
    try:
        from cuda.core import Device, LaunchConfig, launch, ObjectCode
    except ImportError:
        from cuda.core.experimental import Device, LaunchConfig, launch, ObjectCode
    import cuda.core
    Peers.versions["cuda.core"] = getattr(cuda.core, "__version__", "?")
    dev = Device(0)
    dev.set_current()
    cs = dev.create_stream()
    obj = ObjectCode.from_ptx(PTX.encode())
    ck = obj.get_kernel(K4)
    cfg = LaunchConfig(grid=1, block=1)
    bo = dev.allocate(4096, stream=cs)
    bi = dev.allocate(4096, stream=cs)
    ns = {"launch": launch, "cs": cs, "cfg": cfg, "ck": ck, "bo": bo, "bi": bi,
          "n": np.uint32(K4_N), "x": np.float32(K4_X)}
    S.keep.append((obj, bo, bi))
    return py_row("", "", "launch(cs, cfg, ck, bo, bi, n, x)", ns, "cs.sync()")


def _cuda_bindings_row(S):
    """cubind | cuda.bindings driver.cuLaunchKernel, pre-packed"""
    from cuda.bindings import driver
    import cuda.bindings
    Peers.versions["cuda.bindings"] = getattr(cuda.bindings, "__version__", "?")
    f = driver.CUfunction(S.raw_fn[K4])
    st = driver.CUstream(S.raw_stream)
    params = S.raw_params[K4].address
    err, = driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, params, 0)
    if int(err) != 0:
        raise RuntimeError(f"cuLaunchKernel returned {err}")
    driver.cuStreamSynchronize(st)
    ns = {"launch": driver.cuLaunchKernel, "sync": driver.cuStreamSynchronize, "f": f, "st": st, "p": params}
    return py_row("", "", "launch(f, 1, 1, 1, 1, 1, 1, 0, st, p, 0)", ns, "sync(st)")


def _cupy_row(S):
    """cupy | CuPy RawModule function call, 4 args"""
    import numpy as np
    import cupy
    Peers.versions["cupy"] = cupy.__version__
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
    S.keep.append((mod, co, ci))
    return py_row("", "", "f((1,), (1,), args, stream=cs)", {"f": f, "args": args, "cs": cs},
                  "cs.synchronize()")


def _torch_row(S):
    """torch | PyTorch torch.add(a, b, out=c), 1 element"""
    import torch
    Peers.versions["torch"] = torch.__version__
    if not torch.cuda.is_available():
        raise NotAvailable("torch.cuda.is_available() is False")
    a = torch.ones(1, device="cuda")
    b = torch.ones(1, device="cuda")
    c = torch.empty(1, device="cuda")
    torch.add(a, b, out=c)
    torch.cuda.synchronize()
    ts = torch.cuda.current_stream()
    return py_row("", "", "torch.add(a, b, out=c)", {"torch": torch, "a": a, "b": b, "c": c, "ts": ts},
                  "ts.synchronize()")


def _make_triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def bc_bench_triton(x_ptr, y_ptr, n, a):
        tl.store(y_ptr, tl.load(x_ptr) * a + n)

    return bc_bench_triton


def _triton_row(S):
    """triton | Triton @triton.jit kernel, 4 args"""
    import torch
    import triton
    Peers.versions["triton"] = triton.__version__
    if not torch.cuda.is_available():
        raise NotAvailable("torch.cuda.is_available() is False")
    k = _make_triton_kernel()
    x = torch.ones(16, device="cuda")
    y = torch.empty(16, device="cuda")
    grid = (1,)
    k[grid](x, y, K4_N, K4_X)       # compile + warm up
    torch.cuda.synchronize()
    ts = torch.cuda.current_stream()
    return py_row("", "", "k[grid](x, y, 7, 1.5)", {"k": k, "grid": grid, "x": x, "y": y, "ts": ts},
                  "ts.synchronize()")


def _ctypes_row(S):
    """ctypes | ctypes cuLaunchKernel, pre-packed"""
    import ctypes
    path = S.bc.driver_path()
    lib = ctypes.WinDLL(path) if sys.platform == "win32" else ctypes.CDLL(path)
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    sync = lib.cuStreamSynchronize
    sync.restype = ctypes.c_int
    sync.argtypes = [ctypes.c_void_p]
    f, st, p = S.raw_fn[K4], S.raw_stream, S.raw_params[K4].address
    rc = fn(f, 1, 1, 1, 1, 1, 1, 0, st, p, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernel returned {rc}")
    sync(st)
    return py_row("", "", "launch(f, 1, 1, 1, 1, 1, 1, 0, st, p, None)",
                  {"launch": fn, "sync": sync, "f": f, "st": st, "p": p}, "sync(st)")


# ---------------------------------------------------------------- rounds
def run_rounds(rows, rounds, batches, thr_n, rt_n, sync_all, label="launch"):
    live = [r for r in rows if not r.na]
    for r in live:
        _check_once(r, sync_all)
    live = [r for r in live if not r.na]
    t_start = time.monotonic()
    for rnd in range(rounds):
        for r in live:
            if r.na:
                continue
            try:
                if getattr(r, "setup", None):
                    r.setup()
                try:
                    if r.issue:
                        r.samples["issue"].append(_median(r.issue(batches, BATCH)))
                    if r.thr:
                        r.samples["thr"].append(r.thr(thr_n))
                    if r.rt:
                        r.samples["rt"].append(_median(r.rt(rt_n)))
                finally:
                    if getattr(r, "teardown", None):
                        r.teardown()
            except Exception as e:   # noqa: BLE001
                r.mark_na("failed in round %d: %s" % (rnd + 1, _why(e)))
                try:
                    sync_all()
                except Exception:   # noqa: BLE001
                    pass
        if rnd == 0 and label:
            est = (time.monotonic() - t_start) * rounds
            _say(f"  {label}: round 1/{rounds} done, ~{est:.0f} s for all rounds")
    return rows


def ratios(rows):
    """Per-column ratio to the row's reference, median over rounds of the per-round
    ratio (pairs measured close in time)."""
    by_key = {r.key: r for r in rows}
    out = {}
    for r in rows:
        ref = by_key.get(r.ref) if r.ref else None
        res = {}
        for col in ("issue", "thr", "rt"):
            a = r.samples[col]
            b = ref.samples[col] if ref is not None else []
            if r.na or not a or not b or (ref is not None and ref.na):
                res[col] = None
                continue
            n = min(len(a), len(b))
            res[col] = _median([x / y for x, y in zip(a[:n], b[:n]) if y])
        out[r.key] = res
    return out


# ---------------------------------------------------------------- threads
def thread_scaling(S, settings):
    """Aggregate launches/s of 1 vs 4 threads, each on its own stream, batches of
    BATCH launches followed by a sync of that thread's stream (all timed)."""
    B = S.B
    nb = max(1, settings.thread_launches // BATCH)
    results = {}

    def raw_worker(stream):
        B.use_device(0)
        return lambda: B.launch_batches(S.raw_fn[K4], 1, 1, S.raw_params[K4], stream, nb, BATCH)

    variants = [("raw C cuLaunchKernel (GIL released in C loop)", "raw", None)]
    if not S.bc_error:
        _, setter, restore = find_gil_switch(S.bc)
        if setter is None:
            variants.append(("barecuda kernel.launch", "bc", None))
            variants.append(("barecuda plan()", "plan", None))
        else:
            for flag, word in ((False, "held"), (True, "released")):
                variants.append((f"barecuda kernel.launch, GIL {word}", "bc", flag))
                variants.append((f"barecuda plan(), GIL {word}", "plan", flag))

    streams_raw = [B.stream_create() for _ in range(4)]
    streams_bc = [S.bc.Stream() for _ in range(4)] if not S.bc_error else []

    def make_body(kind, i):
        if kind == "raw":
            return raw_worker(streams_raw[i])
        st = streams_bc[i]
        if kind == "bc":
            ns = {"k": S.kern[K4], "s": st, "o": S.bufs[0], "i": S.bufs[1]}
            loops = compile_loops("k.launch(1, 1, o, i, 7, 1.5, stream=s)", ns, "s.synchronize()")
        else:
            p = S.kern[K4].bind(1, 1, *S.k4_args(), stream=st)
            loops = compile_loops("p()", {"p": p, "s": st}, "s.synchronize()")
        return lambda: loops["issue"](nb, BATCH)

    def run(kind, nthreads):
        bodies = [None] * nthreads
        errors = []
        barrier = threading.Barrier(nthreads + 1)

        def target(i):
            try:
                S.dev.set_current()
                B.use_device(0)
                bodies[i] = make_body(kind, i)
                bodies[i]()          # warm-up
                barrier.wait()
                bodies[i]()
            except Exception as e:   # noqa: BLE001
                errors.append(_why(e))
                barrier.abort()

        ts = [threading.Thread(target=target, args=(i,)) for i in range(nthreads)]
        for t in ts:
            t.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        t0 = B.now_ns()
        for t in ts:
            t.join()
        t1 = B.now_ns()
        if errors:
            raise RuntimeError(errors[0])
        return nthreads * nb * BATCH / ((t1 - t0) * 1e-9)

    for label, kind, flag in variants:
        one, four = [], []
        try:
            if flag is not None:
                setter(flag)
            try:
                for _ in range(settings.thread_reps):
                    one.append(run(kind, 1))
                    four.append(run(kind, 4))
            finally:
                if flag is not None and restore is not None:
                    restore()
            results[label] = {"1": _median(one), "4": _median(four), "scaling": _median(four) / _median(one)}
        except Exception as e:   # noqa: BLE001
            results[label] = {"na": _why(e)}
    for st in streams_raw:
        try:
            B.stream_destroy(st)
        except Exception:   # noqa: BLE001
            pass
    return results


# ---------------------------------------------------------------- allocation check
def _alloc_probe(go):
    """Run go() under sys.getallocatedblocks() and under tracemalloc.
    Returns (blocks growth, traced growth bytes, traced peak above start, new traced blocks)."""
    go()                                  # warm-up: caches, lazy imports
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        b0 = sys.getallocatedblocks()
        go()
        b1 = sys.getallocatedblocks()
        tracemalloc.start()
        try:
            go()
            snap0 = tracemalloc.take_snapshot()
            cur0, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            go()
            cur1, peak = tracemalloc.get_traced_memory()
            snap1 = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
    finally:
        if was:
            gc.enable()
    new_blocks = sum(st.count_diff for st in snap1.compare_to(snap0, "lineno") if st.count_diff > 0)
    return b1 - b0, cur1 - cur0, peak - cur0, new_blocks


def alloc_check(S, n):
    """Launch n times (chunks of 1000, then a sync); report the growth of
    sys.getallocatedblocks() and of tracemalloc's traced memory, and the traced peak
    during the loop, each minus the same figure for the same loop around ``pass``
    (so the harness's own objects cancel out: 0 means the launches allocated
    nothing that survived, and a peak of 0 that nothing was allocated in the loop)."""
    if S.bc_error:
        return {"na": S.bc_error}
    out = {}
    s = S.stream
    cases = [("kernel.launch, 4 args", "k.launch(1, 1, o, i, 7, 1.5, stream=s)",
              {"k": S.kern[K4], "s": s, "o": S.bufs[0], "i": S.bufs[1]})]
    try:
        cases.append(("plan()", "p()", {"p": S.kern[K4].bind(1, 1, *S.k4_args(), stream=s), "s": s}))
        plans = [S.kern[K4].bind(1, 1, *S.k4_args(), stream=s) for _ in range(BATCH)]
        cases.append((f"PlanList({BATCH})()", "pl()", {"pl": S.bc.PlanList(plans), "s": s}))
    except Exception:   # noqa: BLE001 -- rows that cannot be built are n/a in the launch table
        pass
    chunk = 1000
    reps = max(1, n // chunk)
    for label, stmt, ns in cases:
        loops = compile_loops(stmt, ns, "s.synchronize()")
        control = compile_loops("pass", ns, "s.synchronize()")   # same harness, same names
        per = BATCH if stmt == "pl()" else 1
        c = max(1, chunk // per)
        try:
            ctl = _alloc_probe(lambda: control["chunks"](reps, c))
            got = _alloc_probe(lambda: loops["chunks"](reps, c))
            tenth = _alloc_probe(lambda: loops["chunks"](max(1, reps // 10), c))
            out[label] = {"launches": reps * c * per, "blocks_growth": got[0] - ctl[0],
                          "traced_growth_bytes": got[1] - ctl[1], "traced_peak_in_loop_bytes": got[2] - ctl[2],
                          "new_traced_blocks": got[3] - ctl[3],
                          # the same figures for a tenth of the launches: equal -> nothing per launch
                          "grows_with_count": got != tenth, "raw": got, "tenth": tenth, "control": ctl}
        except Exception as e:   # noqa: BLE001
            out[label] = {"na": _why(e)}
    return out


# ---------------------------------------------------------------- memory
def _timed_to_sync(B, fn):
    """A callable that runs fn() and returns the ns up to a context synchronize
    (the benchmark module's clock, read from Python like the user's statement)."""
    def once():
        t0 = B.now_ns()
        fn()
        B.ctx_sync()
        return B.now_ns() - t0
    return once


def copy_rows(S, settings):
    """Copy bandwidth host<->device, pinned and pageable; each measured as one copy
    timed up to a context sync."""
    B, bc = S.B, S.bc
    n = settings.copy_bytes
    rows = []
    try:
        import numpy as np
    except ImportError as e:
        r = Row("copy", "copies", section="copy")
        r.mark_na("numpy not installed")
        return [r]
    src = np.ones(n, dtype=np.uint8)            # pageable, pages touched
    dst = np.empty(n, dtype=np.uint8)
    dst.fill(0)
    dptr = B.mem_alloc(n)
    hpin = B.host_alloc(n)
    S.keep_copy = (src, dst, dptr, hpin)

    def timed(fn):
        return _timed_to_sync(B, fn)

    def add(key, label, direction, ref, build):
        r = Row(key, label, ref, section="copy")
        r.direction = direction
        try:
            r.once = build()
            r.once()       # warm-up
        except Exception as e:   # noqa: BLE001
            r.mark_na(("not installed (" + _why(e) + ")") if isinstance(e, ImportError) else _why(e))
            r.once = None
        rows.append(r)

    add("rawh2d_page", "raw C cuMemcpyHtoD, pageable", "H2D", "rawh2d_page",
        lambda: (lambda: B.memcpy_htod(dptr, src, n, 1)[0]))
    add("rawh2d_pin", "raw C cuMemcpyHtoD, pinned", "H2D", "rawh2d_page",
        lambda: (lambda: B.memcpy_htod(dptr, hpin, n, 1)[0]))
    add("rawd2h_page", "raw C cuMemcpyDtoH, pageable", "D2H", "rawd2h_page",
        lambda: (lambda: B.memcpy_dtoh(dst, dptr, n, 1)[0]))
    add("rawd2h_pin", "raw C cuMemcpyDtoH, pinned", "D2H", "rawd2h_page",
        lambda: (lambda: B.memcpy_dtoh(hpin, dptr, n, 1)[0]))

    # barecuda
    state = {}

    def need_bc():
        if S.mem_error:
            raise NotAvailable(S.mem_error)

    def bc_to_device():
        need_bc()
        return timed(lambda: bc.to_device(src))

    def bc_buf():
        need_bc()
        if "buf" not in state:
            state["buf"] = bc.empty(n, "uint8")
        return state["buf"]

    def bc_copy_from():
        buf = bc_buf()
        return timed(lambda: buf.copy_from(src))

    def bc_pinned():
        need_bc()
        if "pin" not in state:
            pb = bc.PinnedBuffer(n)
            np.frombuffer(pb, dtype=np.uint8)[:] = 1     # touch every page
            state["pin"] = pb
        return state["pin"]

    def bc_copy_from_pinned():
        buf, pb = bc_buf(), bc_pinned()
        return timed(lambda: buf.copy_from(pb))

    def bc_to_numpy():
        buf = bc_buf()
        return timed(lambda: buf.to_numpy())

    def bc_copy_to():
        buf = bc_buf()
        return timed(lambda: buf.copy_to(dst))

    def bc_copy_to_pinned():
        buf, pb = bc_buf(), bc_pinned()
        return timed(lambda: buf.copy_to(pb))

    add("bc_to_device", "barecuda bc.to_device(numpy), pageable", "H2D", "rawh2d_page", bc_to_device)
    add("bc_copy_from", "barecuda buf.copy_from(numpy), pageable", "H2D", "rawh2d_page", bc_copy_from)
    add("bc_copy_from_pin", "barecuda buf.copy_from(PinnedBuffer)", "H2D", "rawh2d_page", bc_copy_from_pinned)
    add("bc_to_numpy", "barecuda buf.to_numpy(), pageable", "D2H", "rawd2h_page", bc_to_numpy)
    add("bc_copy_to", "barecuda buf.copy_to(numpy), pageable", "D2H", "rawd2h_page", bc_copy_to)
    add("bc_copy_to_pin", "barecuda buf.copy_to(PinnedBuffer)", "D2H", "rawd2h_page", bc_copy_to_pinned)

    def cupy_h2d():
        import cupy
        return timed(lambda: cupy.asarray(src))

    def cupy_d2h():
        import cupy
        state["cupy"] = cupy.asarray(src)
        a = state["cupy"]
        return timed(lambda: a.get())

    def torch_src():
        import torch
        if "tsrc" not in state:
            state["tsrc"] = torch.from_numpy(src)
        return torch, state["tsrc"]

    def torch_h2d():
        torch, t = torch_src()
        return timed(lambda: t.cuda())

    def torch_d2h():
        torch, t = torch_src()
        state["tdev"] = t.cuda()
        d = state["tdev"]
        return timed(lambda: d.cpu())

    def torch_pin_h2d():
        torch, t = torch_src()
        if "tpin" not in state:
            state["tpin"] = t.pin_memory()
        p = state["tpin"]
        return timed(lambda: p.cuda(non_blocking=True))

    add("cupy_h2d", "CuPy cupy.asarray(numpy), pageable", "H2D", "rawh2d_page", cupy_h2d)
    add("cupy_d2h", "CuPy array.get(), pageable", "D2H", "rawd2h_page", cupy_d2h)
    add("torch_h2d", "PyTorch tensor.cuda(), pageable", "H2D", "rawh2d_page", torch_h2d)
    add("torch_h2d_pin", "PyTorch pinned tensor.cuda()", "H2D", "rawh2d_page", torch_pin_h2d)
    add("torch_d2h", "PyTorch tensor.cpu(), pageable", "D2H", "rawd2h_page", torch_d2h)
    return rows


# ---------------------------------------------------------------- environment
def environment():
    env = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "clock": "CLOCK_MONOTONIC" if sys.platform != "win32" else "QueryPerformanceCounter",
    }
    try:
        import barecuda as bc
        env["barecuda"] = bc.__version__
        env["driver_path"] = bc.driver_path()
        env["driver_version"] = "%d.%d" % bc.driver_version()
        d = bc.Device(0)
        env["gpu"] = d.name
        env["compute_capability"] = "%d.%d" % d.compute_capability
        env["gpu_count"] = bc.device_count()
    except Exception as e:   # noqa: BLE001
        env["driver_error"] = _why(e)
    try:
        import numpy
        env["numpy"] = numpy.__version__
    except Exception:   # noqa: BLE001
        env["numpy"] = None
    env["installed"] = _dist_versions()
    return env


def _dist_versions():
    """Installed versions of the peers (package metadata only: nothing is imported)."""
    try:
        from importlib.metadata import version, PackageNotFoundError
    except ImportError:
        return {}
    out = {}
    for name in ("cuda-core", "cuda-bindings", "cuda-python", "cupy-cuda13x", "cupy-cuda12x", "cupy",
                 "torch", "triton", "pytest-benchmark", "Cython"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
        except Exception:   # noqa: BLE001
            pass
    return out


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------- quick (doctor)
def quick_launch_overhead(rounds=9):
    """(barecuda kernel.launch ns, raw C ns) per launch of the 4-arg kernel, medians
    of alternated rounds of 3 batches; under a second on a GPU."""
    S = Setup()
    try:
        if S.bc_error:
            raise NotAvailable(S.bc_error)
        rows = [c_row("raw4", "raw", S.raw_fn[K4], 1, 1, S.raw_params[K4], S.raw_stream),
                py_row("bc4", "bc", "k.launch(1, 1, o, i, 7, 1.5, stream=s)",
                       {"k": S.kern[K4], "s": S.stream, "o": S.bufs[0], "i": S.bufs[1]},
                       "s.synchronize()", ref="raw4")]
        for r in rows:
            r.thr = r.rt = None
        run_rounds(rows, rounds, 3, 0, 0, S.B.ctx_sync, label=None)
        for r in rows:
            if r.na:
                raise NotAvailable(r.na)
        rat = ratios(rows)["bc4"]["issue"]
        return rows[1].result()["issue"], rows[0].result()["issue"], rat
    finally:
        S.close()


# ---------------------------------------------------------------- output
def _fmt_ns(v):
    if v is None:
        return "-"
    return f"{v:,.0f}"


def _fmt_x(v):
    return "-" if v is None else f"{v:.3f}"


def format_table(env, launch_rows, rat, threads, acheck, mem, settings):
    W = 52
    out = []
    gpu = env.get("gpu", "?")
    out.append("=" * 100)
    out.append(f"barecuda {env.get('barecuda', '?')} benchmark -- {gpu} (cc {env.get('compute_capability', '?')}), "
               f"driver CUDA {env.get('driver_version', '?')}, Python {env['python']}")
    out.append(f"CPU: {env['cpu']}; rounds: {settings.rounds} (alternated), batches of {BATCH}; "
               f"x = ratio to the raw C row of the same run")
    if str(gpu).startswith("FakeCUDA"):
        out.append("NOTE: running on the fakecuda test double -- these numbers mean nothing.")
    if launch_rows:
        out.append("-" * 100)
        out.append(f"{'launch (ns per launch)':<{W}} {'issue':>8} {'x':>6}  {'thr':>8} {'x':>6}  {'rt':>8} {'x':>6}")
        for r in launch_rows:
            if r.na:
                out.append(f"{r.label:<{W}} n/a ({r.na})"[:160])
                continue
            res, x = r.result(), rat.get(r.key, {})
            refmark = "" if r.ref else "  (ref)"
            out.append(f"{r.label:<{W}} {_fmt_ns(res['issue']):>8} {_fmt_x(x.get('issue')):>6}  "
                       f"{_fmt_ns(res['thr']):>8} {_fmt_x(x.get('thr')):>6}  "
                       f"{_fmt_ns(res['rt']):>8} {_fmt_x(x.get('rt')):>6}{refmark}")
        out.append("  refs: raw C row with the same arg count; peers vs raw C 4 args; LaunchConfig vs raw C Ex")
    if threads:
        out.append("-" * 100)
        out.append(f"{'threads, 4-arg kernel, own streams (launches/s)':<{W}} {'1 thread':>10} {'4 threads':>10} {'x':>6}")
        for label, v in threads.items():
            if "na" in v:
                out.append(f"{label:<{W}} n/a ({v['na']})")
            else:
                out.append(f"{label:<{W}} {v['1']:>10,.0f} {v['4']:>10,.0f} {v['scaling']:>6.2f}")
    if acheck:
        out.append("-" * 100)
        out.append(f"{'allocation check (vs the same loop around pass)':<{W}} {'launches':>9} {'blocks+':>8} "
                   f"{'traced+':>8} {'peak+':>8} {'grows with n':>13}")
        if "na" in acheck:
            out.append(f"{'':<{W}} n/a ({acheck['na']})")
        for label, v in acheck.items():
            if label == "na":
                continue
            if "na" in v:
                out.append(f"{label:<{W}} n/a ({v['na']})")
            else:
                out.append(f"{label:<{W}} {v['launches']:>9,} {v['blocks_growth']:>8} "
                           f"{v['traced_growth_bytes']:>7}B {v['traced_peak_in_loop_bytes']:>7}B "
                           f"{'YES' if v['grows_with_count'] else 'no':>13}")
        out.append("  a constant few bytes that do not grow with n is an object CPython keeps on a free list "
                   "(e.g. a call's *args tuple)")
    if mem and mem.get("alloc"):
        out.append("-" * 100)
        out.append(f"{'alloc + free 1 MiB (ns per pair)':<{W}} {'ns':>8} {'x async':>8}")
        ar = ratios(mem["alloc"])
        for r in mem["alloc"]:
            if r.na:
                out.append(f"{r.label:<{W}} n/a ({r.na})"[:160])
                continue
            out.append(f"{r.label:<{W}} {_fmt_ns(r.result()['issue']):>8} {_fmt_x(ar[r.key]['issue']):>8}")
    if mem and mem.get("copy"):
        out.append("-" * 100)
        out.append(f"{'copy %d MiB (GB/s)' % (settings.copy_bytes >> 20):<{W}} {'dir':>4} {'GB/s':>7} {'x raw pageable':>15}")
        by_key = {r.key: r for r in mem["copy"]}
        for r in mem["copy"]:
            if r.na:
                out.append(f"{r.label:<{W}} n/a ({r.na})"[:160])
                continue
            gbs = r.gbs
            ref = by_key.get(r.ref)
            x = (gbs / ref.gbs) if (ref is not None and not ref.na and ref.gbs) else None
            out.append(f"{r.label:<{W}} {r.direction:>4} {gbs:>7.2f} {_fmt_x(x):>15}")
    if mem and mem.get("small_copy"):
        out.append("-" * 100)
        out.append(f"{'pageable copy, us per copy (raw C vs copy_from/to)':<{W}} {'dir':>4} {'raw C':>8} "
                   f"{'barecuda':>9} {'x raw':>6}")
        for c in mem["small_copy"]:
            size = f"{c['bytes'] >> 20} MiB" if c["bytes"] >= 1 << 20 else f"{c['bytes'] >> 10} KiB"
            label = f"  {size}{' (staged)' if c['staged'] else ' (driver path)'}"
            out.append(f"{label:<{W}} {c['dir']:>4} {c['raw_ns'] / 1e3:>8.1f} {c['bc_ns'] / 1e3:>9.1f} "
                       f"{_fmt_x(c['x']):>6}")
    out.append("=" * 100)
    return "\n".join(out)


# ---------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m barecuda.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write every figure and the environment here")
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a rough look in a few seconds)")
    ap.add_argument("--rows", default="launch,threads,alloccheck,memory",
                    help="comma list of: launch, peers, threads, alloccheck, memory (= alloc,copy), alloc, copy")
    ap.add_argument("--rounds", type=int, default=None, help="alternated rounds of the launch rows")
    ap.add_argument("--no-peers", action="store_true", help="skip cuda.core, cuda.bindings, CuPy, PyTorch, Triton, ctypes")
    args = ap.parse_args(argv)
    want = {w.strip() for w in args.rows.split(",") if w.strip()}
    if "memory" in want:
        want |= {"alloc", "copy"}
    if "launch" in want and not args.no_peers:
        want.add("peers")
    settings = Settings(args.quick, args.rounds)

    import barecuda as bc
    env = environment()
    if not bc.is_available():
        try:
            bc._loader.load()
            why = "the driver loaded but reports no CUDA device"
        except Exception as e:   # noqa: BLE001 -- the reason is what we report
            why = f"{type(e).__name__}: {e}"
        print(f"barecuda.bench: no usable GPU; nothing measured. Run `python -m barecuda` for details.\n{why}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"env": env, "skipped": why}, fh, indent=1)
        return 0

    t_all = time.monotonic()
    try:
        S = Setup()
    except Exception as e:   # noqa: BLE001 -- the raw rows need only the driver: say what broke
        import traceback
        traceback.print_exc()
        print(f"barecuda.bench: could not set up the raw C baselines: {_why(e)}")
        return 1
    S.keep = []
    S.gil_switch = None
    env["barecuda_setup_error"] = S.bc_error
    launch_rows, rat, threads, acheck, mem = [], {}, None, None, {}
    failures = env["stage_errors"] = {}

    def stage(name, fn):
        # a stage that breaks is reported and the others still run
        try:
            return fn()
        except Exception as e:   # noqa: BLE001
            import traceback
            traceback.print_exc()
            failures[name] = _why(e)
            _say(f"barecuda.bench: stage {name} failed: {_why(e)}")
            try:
                S.B.ctx_sync()
            except Exception:   # noqa: BLE001
                pass
            return None

    if "launch" in want:
        _say("barecuda.bench: setting up launch rows (peers: importing, compiling)...")
        launch_rows = stage("launch", lambda: build_launch_rows(S, peers_wanted="peers" in want)) or []
        _say(f"barecuda.bench: {len([r for r in launch_rows if not r.na])} launch rows, "
             f"{settings.rounds} alternated rounds")
        stage("launch", lambda: run_rounds(launch_rows, settings.rounds, settings.batches, settings.thr_n,
                                           settings.rt_n, S.B.ctx_sync))
        rat = ratios(launch_rows)
    if "threads" in want:
        _say("barecuda.bench: thread scaling...")
        threads = stage("threads", lambda: thread_scaling(S, settings))
    if "alloccheck" in want:
        _say(f"barecuda.bench: allocation check ({settings.alloc_check_n:,} launches)...")
        acheck = stage("alloccheck", lambda: alloc_check(S, settings.alloc_check_n))
    if "alloc" in want:
        _say("barecuda.bench: allocation rows...")
        mem["alloc"] = stage("alloc", lambda: alloc_rows_measured(S, settings)) or []
    if "copy" in want:
        _say("barecuda.bench: copy rows...")
        mem["copy"] = stage("copy", lambda: copy_rows_measured(S, settings)) or []
        mem["small_copy"] = stage("small_copy", lambda: small_copy_rows(S, settings)) or []
    env["peers"] = dict(Peers.versions)
    env["gil_switch"] = S.gil_switch
    env["elapsed_s"] = round(time.monotonic() - t_all, 1)
    table = format_table(env, launch_rows, rat, threads, acheck, mem, settings)
    if failures:
        table += "\n" + "\n".join(f"STAGE FAILED: {k}: {v}" for k, v in failures.items())
    if args.json:
        doc = {
            "env": env, "settings": settings.as_dict(),
            "launch": [_row_json(r, rat) for r in launch_rows],
            "threads": threads, "alloc_check": acheck,
            "alloc": [_row_json(r, ratios(mem["alloc"])) for r in mem.get("alloc", [])],
            "copy": [_copy_json(r) for r in mem.get("copy", [])],
            "small_copy": mem.get("small_copy", []),
        }
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1, default=str)
        _say(f"barecuda.bench: wrote {args.json}")
    _say(f"barecuda.bench: done in {env['elapsed_s']} s")
    print(table)
    S.close()
    return 1 if failures else 0


def alloc_rows_measured(S, settings):
    rows = _alloc_row_objects(S)
    run_rounds(rows, settings.mem_rounds, settings.mem_batches, 0, 0, S.B.ctx_sync, label="alloc")
    return rows


def _alloc_row_objects(S):
    B, bc = S.B, S.bc
    size = 1 << 20
    rows = []
    sync_ns = {"sync": B.ctx_sync}

    def c(key, label, fn):
        r = Row(key, label, "rawasync", section="alloc")
        r.stmt = "C loop"
        r.issue = lambda nb, bs: [t / bs for t in fn(nb, bs)]
        r.run = lambda n: fn(1, n)
        rows.append(r)

    c("rawalloc", "raw C cuMemAlloc + cuMemFree", lambda nb, bs: B.alloc_free(size, nb, bs))
    c("rawasync", "raw C cuMemAllocAsync + cuMemFreeAsync",
      lambda nb, bs: B.alloc_free_async(S.raw_stream, size, nb, bs))

    def bc_empty():
        if S.mem_error:
            raise NotAvailable(S.mem_error)
        return f"empty({size}, 'uint8')", {"empty": bc.empty}

    def bc_alloc():
        fn = getattr(bc, "alloc", None)
        if fn is None:
            raise NotAvailable("barecuda.alloc is missing")
        return f"alloc({size})", {"alloc": fn}

    def cupy_pool():
        import cupy
        Peers.versions["cupy"] = cupy.__version__
        return f"alloc({size})", {"alloc": cupy.cuda.alloc}

    def torch_empty():
        import torch
        Peers.versions["torch"] = torch.__version__
        dev = torch.device("cuda")
        return f"empty({size}, dtype=u8, device=dev)", {"empty": torch.empty, "u8": torch.uint8, "dev": dev}

    def cuda_core_alloc():
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        dev = Device(0)
        dev.set_current()
        st = dev.create_stream()
        S.keep.append(st)
        return f"dev.allocate({size}, stream=st).close()", {"dev": dev, "st": st}

    for key, label, b in (("bcempty", "barecuda bc.empty(1 MiB) + drop", bc_empty),
                          ("bcalloc", "barecuda bc.alloc(1 MiB) + drop", bc_alloc),
                          ("cupypool", "CuPy pool: cupy.cuda.alloc + drop", cupy_pool),
                          ("torchempty", "PyTorch torch.empty + drop", torch_empty),
                          ("cucoreall", "cuda.core Device.allocate + close", cuda_core_alloc)):
        try:
            stmt, ns = b()
            ns = dict(ns, **sync_ns)
            r = py_row(key, label, stmt, ns, "sync()", ref="rawasync", roundtrip=False)
            r.section = "alloc"
            r.thr = None
        except Exception as e:   # noqa: BLE001
            r = Row(key, label, "rawasync", section="alloc")
            r.mark_na(("not installed (" + _why(e) + ")") if isinstance(e, ImportError) else _why(e))
        rows.append(r)
    return rows


def copy_rows_measured(S, settings):
    rows = copy_rows(S, settings)
    live = [r for r in rows if not r.na and getattr(r, "once", None)]
    for r in live:
        r.times = []
    t_start = time.monotonic()
    for rnd in range(settings.copy_rounds):
        for r in live:
            if r.na:
                continue
            try:
                r.times.append(r.once())
            except Exception as e:   # noqa: BLE001
                r.mark_na(_why(e))
        if rnd == 0:
            _say(f"  copy: round 1/{settings.copy_rounds} done, "
                 f"~{(time.monotonic() - t_start) * settings.copy_rounds:.0f} s for all rounds")
    for r in rows:
        t = _median(getattr(r, "times", []) or [])
        r.gbs = (settings.copy_bytes / t) if t else None
        if r.gbs is None and not r.na:
            r.mark_na("not measured")
    S.keep.append(rows)
    return rows


def _row_json(r, rat):
    return {"key": r.key, "label": r.label, "ref": r.ref, "stmt": r.stmt, "na": r.na, "per": r.per,
            "median_ns": r.result(), "ratio": rat.get(r.key), "samples_ns": r.samples}


SMALL_COPY_SIZES = (64 << 10, 1 << 20, 4 << 20, 16 << 20)


def small_copy_rows(S, settings):
    """Pageable copies around the staging threshold: the driver's own copy (raw C,
    timed in C) against ``copy_from``/``copy_to`` (timed from Python, the call a user
    writes). Below the threshold barecuda takes the driver's path, so the ratio is the
    Python call's cost; above it, staging. Rows alternate over many rounds; medians."""
    B, bc = S.B, S.bc
    if S.mem_error:
        raise NotAvailable(S.mem_error)
    import numpy as np
    from barecuda import _staging
    threshold = _staging.configure()["threshold"]
    rounds = 21 if settings.quick else 101
    out = []
    for n in SMALL_COPY_SIZES:
        src = np.ones(n, dtype=np.uint8)
        dst = np.zeros(n, dtype=np.uint8)
        dptr = B.mem_alloc(n)
        buf = bc.empty(n, "uint8")
        S.keep_copy_small = getattr(S, "keep_copy_small", []) + [(src, dst, buf)]

        fns = [lambda: B.memcpy_htod(dptr, src, n, 1)[0], _timed_to_sync(B, lambda: buf.copy_from(src)),
               lambda: B.memcpy_dtoh(dst, dptr, n, 1)[0], _timed_to_sync(B, lambda: buf.copy_to(dst))]
        times = [[] for _ in fns]
        for f in fns:
            f()   # warm-up (builds the stager above the threshold)
        try:
            for _ in range(rounds):
                for i, f in enumerate(fns):
                    times[i].append(f())
        finally:
            B.mem_free(dptr)
        med = [_median(t) for t in times]
        for d, raw, ours in (("H2D", med[0], med[1]), ("D2H", med[2], med[3])):
            out.append({"bytes": n, "dir": d, "raw_ns": raw, "bc_ns": ours, "staged": n >= threshold,
                        "x": (ours / raw) if raw else None})
    return out


def _copy_json(r):
    return {"key": r.key, "label": r.label, "ref": r.ref, "direction": getattr(r, "direction", None),
            "na": r.na, "gb_per_s": getattr(r, "gbs", None), "samples_ns": getattr(r, "times", [])}


if __name__ == "__main__":
    sys.exit(main())
