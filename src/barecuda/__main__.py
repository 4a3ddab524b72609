"""``python -m barecuda``: the doctor.

Reports the package, the Python, the driver (or, without one, what was tried and
how to fix it), every device with its key attributes and whether NVRTC can be
found; on a GPU it also runs a self-check (a vector add verified against a
reference computed on the host) and measures the launch overhead against a raw C
loop with the benchmark's harness.

Exit status: 0 when everything is fine or when there is no GPU; 1 when a
self-check fails.
"""
import os
import platform
import random
import sys

VADD_PTX = r"""
.version 8.0
.target sm_52
.address_size 64

.visible .entry bc_doctor_vadd(
    .param .u64 vadd_out,
    .param .u64 vadd_a,
    .param .u64 vadd_b,
    .param .u32 vadd_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    ld.param.u32 %r5, [vadd_n];
    setp.ge.u32 %p1, %r4, %r5;
    @%p1 bra $L_done;
    mul.wide.u32 %rd1, %r4, 4;
    ld.param.u64 %rd2, [vadd_a];
    cvta.to.global.u64 %rd2, %rd2;
    add.u64 %rd2, %rd2, %rd1;
    ld.param.u64 %rd3, [vadd_b];
    cvta.to.global.u64 %rd3, %rd3;
    add.u64 %rd3, %rd3, %rd1;
    ld.param.u64 %rd4, [vadd_out];
    cvta.to.global.u64 %rd4, %rd4;
    add.u64 %rd4, %rd4, %rd1;
    ld.global.f32 %f1, [%rd2];
    ld.global.f32 %f2, [%rd3];
    add.rn.f32 %f3, %f1, %f2;
    st.global.f32 [%rd4], %f3;
$L_done:
    ret;
}
"""

W = 14   # label column


def line(label, text):
    print(f"{label + ':':<{W}}{text}")


def _gib(n):
    return f"{n / (1 << 30):.1f} GiB"


# ------------------------------------------------------------------ NVRTC
def find_nvrtc():
    """(path or None, where we looked). Only reports; nothing is loaded."""
    import ctypes.util
    import glob
    looked = []
    if sys.platform == "win32":
        pats = []
        for var in ("CUDA_PATH",) + tuple(k for k in os.environ if k.startswith("CUDA_PATH_V")):
            base = os.environ.get(var)
            if base:
                pats.append(os.path.join(base, "bin", "nvrtc64_*.dll"))
        names = ["nvrtc64_130_0", "nvrtc64_120_0", "nvrtc"]
    else:
        pats = ["/usr/local/cuda/lib64/libnvrtc.so*", "/usr/local/cuda-*/lib64/libnvrtc.so*",
                "/usr/local/cuda/targets/*/lib/libnvrtc.so*", "/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
                "/usr/lib64/libnvrtc.so*"]
        names = ["nvrtc"]
    for d in sys.path:
        for sub in (("nvidia", "cu13", "lib"), ("nvidia", "cuda_nvrtc", "lib"), ("nvidia", "cu13", "bin"),
                    ("nvidia", "cuda_nvrtc", "bin")):
            p = os.path.join(d, *sub)
            if os.path.isdir(p):
                pats.append(os.path.join(p, "nvrtc64_*.dll" if sys.platform == "win32" else "libnvrtc.so*"))
    for name in names:
        looked.append(f"find_library({name!r})")
        found = ctypes.util.find_library(name)
        if found:
            return found, looked
    for pat in pats:
        looked.append(pat)
        hits = sorted(h for h in glob.glob(pat) if "builtins" not in os.path.basename(h)
                      and "alt" not in os.path.basename(h))
        if hits:
            return hits[-1], looked
    return None, looked


# ------------------------------------------------------------------ self-check
def self_check(bc, dev):
    """Vector add of a few odd sizes on fresh random data, verified on the host.
    Returns (ok, message)."""
    mod = bc.Module.from_ptx(VADD_PTX)
    k = mod.get_kernel("bc_doctor_vadd")
    s = bc.Stream(dev)
    rng = random.Random()
    try:
        import numpy as np
    except ImportError:
        np = None
    checked = []
    for n in (1, 1023, 100_003):
        if np is not None:
            a = np.random.default_rng().standard_normal(n).astype(np.float32)
            b = np.random.default_rng().standard_normal(n).astype(np.float32)
            ref = a + b                                   # float32 add, correctly rounded
            da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
            out = bc.empty(n, "float32", stream=s)
            k.launch((n + 255) // 256, 256, out, da, db, n, stream=s)
            got = out.to_numpy(stream=s)
            bad = np.flatnonzero(got != ref)
            how = "numpy"
            if bad.size:
                i = int(bad[0])
                return False, (f"vector add n={n}: {bad.size} wrong values, first at [{i}]: "
                               f"{float(got[i])!r} != {float(ref[i])!r} = {float(a[i])!r} + {float(b[i])!r}")
        else:
            from array import array
            a = array("f", (rng.gauss(0, 1) for _ in range(n)))
            b = array("f", (rng.gauss(0, 1) for _ in range(n)))
            # the sum of two floats is exact in a double; rounding it to float gives
            # the correctly rounded float32 sum
            ref = array("f", (x + y for x, y in zip(a, b)))
            da, db = bc.to_device(a, stream=s), bc.to_device(b, stream=s)
            out = bc.empty(n, "float32", stream=s)
            k.launch((n + 255) // 256, 256, out, da, db, n, stream=s)
            raw = out.copy_to(bytearray(4 * n), stream=s)
            s.synchronize()
            got = array("f")
            got.frombytes(bytes(raw))
            how = "pure Python"
            for i in range(n):
                if got[i] != ref[i] and not (got[i] != got[i] and ref[i] != ref[i]):
                    return False, (f"vector add n={n}: wrong value at [{i}]: {got[i]!r} != {ref[i]!r}")
        checked.append(n)
    return True, f"vector add (float32, n = {', '.join(f'{n:,}' for n in checked)}) OK, verified with {how}"


# ------------------------------------------------------------------ main
def main():
    import barecuda as bc
    from barecuda import _loader

    print(f"barecuda {bc.__version__}")
    line("python", f"{platform.python_implementation()} {sys.version.split()[0]} ({sys.executable})")
    line("platform", f"{platform.platform()} [{platform.machine()}]")
    try:
        import numpy
        line("numpy", f"{numpy.__version__} (optional)")
    except ImportError:
        line("numpy", "not installed (optional: needed only for numpy arrays in/out)")

    try:
        _loader.load()
    except Exception as e:   # noqa: BLE001 -- the doctor reports, it does not crash
        nvrtc, _ = find_nvrtc()
        line("driver", "NOT LOADED")
        for ln in str(e).splitlines():
            print(" " * W + ln)
        if "BARECUDA_LIBCUDA" not in str(e):
            print(" " * W + "Fix: install the NVIDIA driver (check with `nvidia-smi`), or point barecuda at it: "
                  "BARECUDA_LIBCUDA=/path/to/libcuda.so.1")
        line("nvrtc", f"found: {nvrtc}" if nvrtc else "not found")
        line("status", "no CUDA driver: nothing to check on a GPU (exit 0)")
        return 0

    v = bc.driver_version()
    line("driver", f"{bc.driver_path()}  (CUDA {v[0]}.{v[1]})")
    if os.environ.get("BARECUDA_LIBCUDA"):
        print(" " * W + f"(chosen by BARECUDA_LIBCUDA={os.environ['BARECUDA_LIBCUDA']})")
    try:
        n = bc.device_count()
    except Exception as e:   # noqa: BLE001
        n = 0
        line("devices", f"cannot count devices: {e}")
    fake = False
    devs = []
    if n == 0:
        line("devices", "none visible (check `nvidia-smi` and CUDA_VISIBLE_DEVICES)")
    for i in range(n):
        try:
            d = bc.Device(i)
            devs.append(d)
            name = d.name
            fake = fake or name.startswith("FakeCUDA")
            cc = d.compute_capability
            a = d.attribute
            print(f"  [{i}] {name}  cc {cc[0]}.{cc[1]}  {_gib(d.total_memory)}  "
                  f"{a('multiprocessor_count')} SMs")
            print(f"      PCI {d.pci_bus_id}  {d.uuid}")
            print(f"      clocks: SM {a('clock_rate') // 1000} MHz, memory {a('memory_clock_rate') // 1000} MHz, "
                  f"bus {a('global_memory_bus_width')}-bit, L2 {a('l2_cache_size') >> 20} MiB")
        except Exception as e:   # noqa: BLE001
            print(f"  [{i}] cannot query: {type(e).__name__}: {e}")

    nvrtc, looked = find_nvrtc()
    line("nvrtc", f"found: {nvrtc}" if nvrtc else "not found (looked at: " + "; ".join(looked[:6]) + " ...)")

    if not devs:
        line("status", "no GPU: nothing to check (exit 0)")
        return 0
    if fake:
        line("self-check", "skipped: this is the fakecuda test double (kernels do not run)")
    failed = False
    if not fake:
        try:
            ok, msg = self_check(bc, devs[0])
        except Exception as e:   # noqa: BLE001
            ok, msg = False, f"could not run: {type(e).__name__}: {e}"
        line("self-check", ("" if ok else "FAILED: ") + msg)
        failed = not ok
    from barecuda.bench import quick_launch_overhead, _why
    try:
        bc_ns, raw_ns, ratio = quick_launch_overhead()
        note = "  (fake driver: meaningless)" if fake else ""
        print(f"launch overhead: barecuda kernel.launch {bc_ns:,.0f} ns vs raw C {raw_ns:,.0f} ns "
              f"(ratio {ratio:.3f}){note}")
    except Exception as e:   # noqa: BLE001
        print(f"launch overhead: n/a ({_why(e)})")
    line("status", "SELF-CHECK FAILED (exit 1)" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
