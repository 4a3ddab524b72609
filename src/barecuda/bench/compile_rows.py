"""Compile rows: kernels from CUDA C++ source, barecuda vs CuPy and cuda.core.

Section ``compile`` (``--rows compile``), per library, medians over repeats:

* cold compile: NVRTC runs (barecuda: its cache off / an empty cache folder;
  CuPy: a fresh cache folder and no in-memory cache; cuda.core: it has no cache);
* warm compile: a new process would find the result on disk (barecuda: in-process
  memo cleared, disk entry present; CuPy: its memory cache cleared);
* in-process hit: the same program compiled again in this process;
* module load: the compiled image loaded into a module (driver ``cuModuleLoadData``).

Each program is made unique per repeat (a comment with a counter) for the cold rows,
so no cache at any level answers them. Times in microseconds; no ratios (there is no
raw C compile loop), and nothing here is asserted.
"""
import os
import shutil
import tempfile
import time

from barecuda.bench.harness import now_ns
from barecuda.bench.report import Section

ORDER = 40
SOURCE = r"""
template <typename T>
__global__ void saxpy(T *y, const T *x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void vadd(float *out, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""
COLUMNS = [("cold", 10), ("warm", 10), ("hit", 10), ("load", 10)]


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def _us(f):
    t = now_ns()
    f()
    return (now_ns() - t) / 1e3


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:,.1f}" if v < 10_000 else f"{v:,.0f}"


class _TempCache:
    def __init__(self, var):
        self.var = var

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="bc-compile-bench-")
        self.old = os.environ.get(self.var)
        os.environ[self.var] = self.dir
        return self.dir

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop(self.var, None)
        else:
            os.environ[self.var] = self.old
        shutil.rmtree(self.dir, ignore_errors=True)


def _barecuda(bc, reps):
    from barecuda import _program
    out = {}
    with _TempCache("BARECUDA_CACHE_DIR"):
        cold, warm, hit, load = [], [], [], []
        for i in range(reps):
            src = SOURCE + f"\n// cold {i} {time.time_ns()}\n"
            bc.clear_cache(disk=False)
            cold.append(_us(lambda: bc.Program(src).compile(name_expressions=["saxpy<float>"])))
            bc.clear_cache(disk=False)        # memo gone, disk entry stays: what a new process sees
            warm.append(_us(lambda: bc.Program(src).compile(name_expressions=["saxpy<float>"])))
            p = bc.Program(src)
            oc = p.compile(name_expressions=["saxpy<float>"])
            hit.append(_us(lambda: p.compile(name_expressions=["saxpy<float>"])))
            try:
                load.append(_us(lambda: oc.load().get_kernel("vadd")))
            except Exception as e:   # noqa: BLE001 -- e.g. a cubin on the driver double: compile rows stand
                out["load_na"] = f"{type(e).__name__}"
        out = {**out, "cold": _median(cold), "warm": _median(warm), "hit": _median(hit), "load": _median(load),
               "kind": oc.kind, "nvrtc": list(_program.nvrtc_version())}
    return out


def _cupy(reps):
    # CuPy caches on disk (CUPY_CACHE_DIR) and in memory; a new RawModule of a known
    # source is its "warm" case (it does not separate the two levels).
    import cupy
    cold, warm = [], []
    with _TempCache("CUPY_CACHE_DIR"):
        for i in range(reps):
            src = SOURCE + f"\n// cold {i} {time.time_ns()}\n"

            def build():
                cupy.RawModule(code=src, name_expressions=["saxpy<float>"]).get_function("vadd")
            cold.append(_us(build))
            warm.append(_us(build))
    return {"cold": _median(cold), "warm": _median(warm), "hit": None, "load": None, "version": cupy.__version__}


def _cuda_core(reps):
    try:
        from cuda.core import Device as CDevice, Program as CProgram, ProgramOptions
    except ImportError:          # cuda.core before 0.4 kept them in .experimental
        from cuda.core.experimental import Device as CDevice, Program as CProgram, ProgramOptions
    dev = CDevice()
    dev.set_current()
    arch = "".join(str(v) for v in dev.compute_capability)
    cold, load = [], []
    for i in range(reps):
        src = SOURCE + f"\n// cold {i} {time.time_ns()}\n"
        holder = {}

        def compile_():
            holder["oc"] = CProgram(src, "c++", ProgramOptions(arch=f"sm_{arch}")).compile(
                "cubin", name_expressions=("saxpy<float>",))
        cold.append(_us(compile_))
        load.append(_us(lambda: holder["oc"].get_kernel("vadd")))
    return {"cold": _median(cold), "warm": None, "hit": None, "load": _median(load)}


def compile_section(ctx):
    bc = ctx.bc
    reps = 3 if ctx.settings.quick else 9
    sec = Section("compile", "compile from source (us)", COLUMNS,
                  notes=["cold: NVRTC runs; warm: result on disk, not in memory; hit: same program again "
                         "in-process; load: image -> module + kernel. '-': the library has no such step."])
    data = []
    for label, fn in (("barecuda Program", lambda: _barecuda(bc, reps)), ("cupy.RawModule", lambda: _cupy(reps)),
                      ("cuda.core Program", lambda: _cuda_core(reps))):
        try:
            r = fn()
        except Exception as e:   # noqa: BLE001 -- a peer that is missing or fails is n/a, with the reason
            sec.add(label, f"n/a ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})")
            data.append({"label": label, "na": f"{type(e).__name__}: {e}"})
            continue
        sec.add(label, [_fmt(r[c]) for c, _ in COLUMNS])
        data.append(dict(r, label=label))
    sec.data = data
    return sec


SECTIONS = {"compile": compile_section}
ALIASES = {"nvrtc": ("compile",)}
