"""``python -m barecuda``: the doctor.

Reports the package and how it was built, the Python, the ``BARECUDA_*`` and
``CUDA_VISIBLE_DEVICES`` settings, the driver (telling apart no driver, a driver
with no device, no permission on ``/dev/nvidia*`` and a driver too old), every
device with its key attributes, the NVIDIA kernel module's version, the NVRTC,
nvJitLink, NCCL and cuBLASLt libraries barecuda would use (found by ``_libfind``, with
their versions; what to install when one is missing), and the installed peers (torch, CuPy, cuda-python; from package metadata,
nothing is imported). On a GPU it also runs a self-check (a vector add verified
against a reference computed on the host) and measures the launch overhead against a
raw C loop with the public benchmark API (``barecuda.bench.quick_launch_overhead``).

Options: ``--json`` (the same facts as one JSON document on stdout, for bug
reports), ``--no-bench`` (skip the launch measurement), ``--help``.

Exit status: 0 when everything is fine or when there is no GPU; 1 when a
self-check fails.
"""
import argparse
import glob
import json
import os
import platform
import random
import re
import sys

from barecuda import _libfind, _ptx_samples

W = 14                    # label column
VADD_PTX = _ptx_samples.DOCTOR_VADD   # the check kernel (one place for the package's PTX)


# ------------------------------------------------------------------ settings and build
def settings():
    """The environment variables that change what barecuda does."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith("BARECUDA_") or k in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH")}


def build_info():
    """How this copy was built: ``barecuda._build_info.BUILD`` when the build wrote it,
    else what can be read from the compiled modules (the Cython ABI tag)."""
    try:
        import barecuda._build_info as bi
        info = getattr(bi, "BUILD", None)
        if isinstance(info, dict):
            return dict(info, source="barecuda._build_info")
    except ImportError:
        pass
    import barecuda
    info = getattr(barecuda, "_build_info", None)
    if isinstance(info, dict):
        return dict(info, source="barecuda._build_info")
    out = {"mode": "unknown (no barecuda._build_info)", "source": "compiled module"}
    try:
        import re
        from barecuda import _errors
        with open(_errors.__file__, "rb") as fh:
            m = re.search(rb"_cython_(\d+)_(\d+)_(\d+)", fh.read())
        if m:
            out["cython"] = ".".join(x.decode() for x in m.groups())
        out["module"] = _errors.__file__
    except (OSError, ImportError, AttributeError):
        pass
    return out


def installed_peers():
    """``{distribution: version}`` of torch, CuPy and cuda-python (and numpy), read
    from package metadata: nothing is imported."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:
        return {}
    out = {}
    for name in ("torch", "cupy-cuda13x", "cupy-cuda12x", "cupy", "cuda-python", "cuda-bindings", "cuda-core",
                 "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
        except Exception:   # noqa: BLE001 -- broken metadata of another package
            pass
    return out


# ------------------------------------------------------------------ libraries
def _open_nvrtc():
    from barecuda import _nvrtc
    return _nvrtc.nvrtc_path(), _nvrtc.nvrtc_version()


def _open_nvjitlink():
    from barecuda import _nvrtc
    return _nvrtc.nvjitlink_path(), _nvrtc.nvjitlink_version()


def _open_nccl():
    from barecuda import _nccl
    return _nccl.library_path(), _nccl.version()


def _version_from_file(path):
    """``libcublasLt.so.13.1.0.3`` -> ``(13, 1, 0, 3)``: the version in the real file's name."""
    m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", os.path.realpath(path))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _find_only(spec):
    """Where ``spec`` would be opened from, without opening it (barecuda does not open it yet)."""
    for cand in _libfind.candidates(spec):
        if os.path.isabs(cand) and os.path.isfile(cand):
            return cand, _version_from_file(cand)
    raise FileNotFoundError(f"not found (in none of the {len(_libfind.searched_folders(spec))} folders searched)")


# (report key, _libfind entry, how to open it and read its path and version)
LIBRARIES = (
    ("nvrtc", _libfind.NVRTC, _open_nvrtc),
    ("nvjitlink", _libfind.NVJITLINK, _open_nvjitlink),
    ("nccl", _libfind.NCCL, _open_nccl),
    ("cublaslt", _libfind.CUBLASLT, lambda: _find_only(_libfind.CUBLASLT)),
)


def find_library(spec, opener, cuda_major=None):
    """``{"name", "path", "version"}`` of one library barecuda opens on demand, or
    ``{"name", "path": None, "error", "fix"}`` when it cannot be opened."""
    try:
        path, version = opener()
    except Exception as e:   # noqa: BLE001 -- the doctor reports, it does not crash
        tried = getattr(e, "tried", None)
        first = (f"not found ({len(tried)} candidate(s) tried, {len(_libfind.searched_folders(spec))} folders "
                 "searched)" if tried is not None else (str(e).splitlines() or [type(e).__name__])[0])
        return {"name": spec.title, "path": None, "error": first,
                "fix": f"{_libfind.install_advice(spec, cuda_major)}, or {spec.env}=/path/to/{spec.file_name}"}
    return {"name": spec.title, "path": os.fspath(path),
            "version": ".".join(map(str, version)) if version else None}


def libraries(cuda_major=None):
    return {key: find_library(spec, opener, cuda_major) for key, spec, opener in LIBRARIES}


def kernel_module_version(path="/proc/driver/nvidia/version"):
    """The NVIDIA kernel module's version (``580.95.05``), or None (no module, not Linux)."""
    try:
        with open(path) as f:
            m = re.search(r"Kernel Module(?: for \w+)?\s+(\d+(?:\.\d+)+)", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


# ------------------------------------------------------------------ driver state
def device_nodes(pattern="/dev/nvidia*"):
    """``[(path, accessible)]`` of the NVIDIA device nodes (read and write needed)."""
    return [(p, os.access(p, os.R_OK | os.W_OK)) for p in sorted(glob.glob(pattern))]


def diagnose(load_error, version=None, count=None, nodes=()):
    """Tell the driver states apart.

    Parameters
    ----------
    load_error : Exception or None
        What loading the driver raised (None: it loaded).
    version : tuple or None
        The loaded driver's CUDA version.
    count : int or None
        ``device_count()`` (None: could not be asked).
    nodes : list of (path, accessible)
        The ``/dev/nvidia*`` nodes.

    Returns
    -------
    (state, message, fix)
        state is one of ``"ok"``, ``"no-driver"``, ``"driver-too-old"``,
        ``"no-permission"``, ``"no-device"``, ``"driver-error"``.
    """
    from barecuda import CudaError, DriverNotFoundError
    from barecuda._errors import CUresult
    from barecuda._loader import MIN_DRIVER_VERSION, version_text
    min_text = version_text(MIN_DRIVER_VERSION)          # the one table: bc_runtime.h
    denied = [p for p, ok in nodes if not ok]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    vis_hint = (f" CUDA_VISIBLE_DEVICES={visible!r} hides devices: unset it or name a device that exists."
                if visible is not None else " Check `nvidia-smi`.")
    perm_fix = (f"this user cannot open {', '.join(denied[:3])}: add it to the group owning them "
                "(often `video` or `render`), or fix the device nodes' permissions.")
    if isinstance(load_error, DriverNotFoundError):
        tried = " ".join(getattr(load_error, "tried", ())) or str(load_error)
        if "too old" in tried or "cuGetProcAddress_v2" in tried:
            return ("driver-too-old", f"a CUDA driver library was found but it is older than CUDA {min_text}",
                    f"upgrade the NVIDIA driver to one for CUDA {min_text} or newer")
        return ("no-driver", "no CUDA driver library could be loaded",
                "install the NVIDIA driver (check with `nvidia-smi`), or point barecuda at it: "
                "BARECUDA_LIBCUDA=/path/to/libcuda.so.1")
    if isinstance(load_error, CudaError):
        code = getattr(load_error, "code", None)
        if code == CUresult.CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
            return ("driver-too-old", f"the driver is older than the kernel module or CUDA needs: {load_error}",
                    "upgrade the NVIDIA driver (user-space and kernel module together)")
        if denied:
            return ("no-permission", f"the driver loaded but cuInit failed ({load_error.name}) and "
                    f"{len(denied)} device node(s) cannot be opened", perm_fix)
        if code == CUresult.CUDA_ERROR_NO_DEVICE:
            return ("no-device", "the driver is installed and loaded, but it reports no CUDA device",
                    "the driver sees no GPU." + vis_hint)
        return ("driver-error", f"the driver loaded but cannot start: {load_error}",
                "check `nvidia-smi` and `dmesg` (a kernel module that does not match the driver, "
                "or a GPU that fell off the bus)")
    if load_error is not None:
        return ("driver-error", f"{type(load_error).__name__}: {load_error}", "see the message")
    if version is not None and version[0] * 1000 + version[1] * 10 < MIN_DRIVER_VERSION:
        return ("driver-too-old", f"the driver is CUDA {version[0]}.{version[1]}; barecuda needs "
                f"{min_text} or newer", "upgrade the NVIDIA driver")
    if not count:
        if denied:
            return ("no-permission", f"the driver reports no device and {len(denied)} device node(s) "
                    "cannot be opened", perm_fix)
        return ("no-device", "the driver is installed and loaded, but it reports no CUDA device",
                "the driver sees no GPU." + vis_hint)
    return ("ok", f"{count} device(s)", None)


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


# ------------------------------------------------------------------ collect, print
def _gib(n):
    return f"{n / (1 << 30):.1f} GiB"


def collect(run_bench=True, run_self_check=True):
    """Every fact the doctor reports, as one JSON-able dict (``--json`` prints it)."""
    import barecuda as bc
    from barecuda import _loader
    rep = {"barecuda": bc.__version__, "package": os.path.dirname(bc.__file__),
           "python": f"{platform.python_implementation()} {sys.version.split()[0]} ({sys.executable})",
           "platform": f"{platform.platform()} [{platform.machine()}]",
           "build": build_info(), "settings": settings(), "peers": installed_peers()}
    load_error = None
    try:
        _loader.load()
    except Exception as e:   # noqa: BLE001 -- the doctor reports, it does not crash
        load_error = e
    nodes = device_nodes()
    rep["device_nodes"] = {p: ("ok" if ok else "NO ACCESS") for p, ok in nodes}
    rep["kernel_module"] = kernel_module_version()
    version = count = None
    if load_error is None:
        version = bc.driver_version()
        rep["driver"] = {"path": bc.driver_path(), "cuda": "%d.%d" % version,
                         "library_version": ".".join(map(str, _version_from_file(bc.driver_path()) or ())) or None}
        try:
            count = bc.device_count()
        except Exception as e:   # noqa: BLE001
            rep["driver"]["count_error"] = f"{type(e).__name__}: {e}"
    else:
        rep["driver"] = {"error": f"{type(load_error).__name__}: {load_error}"}
    state, msg, fix = diagnose(load_error, version, count, nodes)
    rep["state"] = {"state": state, "message": msg, "fix": fix}
    rep["devices"] = []
    devs = []
    for i in range(count or 0):
        try:
            d = bc.Device(i)
            a = d.attribute
            cc = d.compute_capability
            devs.append(d)
            rep["devices"].append({
                "ordinal": i, "name": d.name, "cc": f"{cc[0]}.{cc[1]}", "memory": _gib(d.total_memory),
                "sms": a("multiprocessor_count"), "pci": d.pci_bus_id, "uuid": str(d.uuid),
                "clocks": f"SM {a('clock_rate') // 1000} MHz, memory {a('memory_clock_rate') // 1000} MHz, "
                          f"bus {a('global_memory_bus_width')}-bit, L2 {a('l2_cache_size') >> 20} MiB"})
        except Exception as e:   # noqa: BLE001
            rep["devices"].append({"ordinal": i, "error": f"{type(e).__name__}: {e}"})
    if devs:
        try:    # peer access, atomics and performance rank between every pair; NUMA/PCI identity
            rep["topology"] = bc.topology()
        except Exception as e:   # noqa: BLE001
            rep["topology"] = {"error": f"{type(e).__name__}: {e}"}
    rep["libraries"] = libraries(version[0] if version else None)
    rep["failed"] = False
    if state == "ok" and devs:
        if not run_self_check:
            rep["self_check"] = {"ok": None, "message": "skipped (--no-self-check)"}
        else:
            try:
                ok, m = self_check(bc, devs[0])
            except Exception as e:   # noqa: BLE001
                ok, m = False, f"could not run: {type(e).__name__}: {e}"
            rep["self_check"] = {"ok": ok, "message": m}
            rep["failed"] = not ok
        if run_bench:
            try:
                from barecuda.bench import quick_launch_overhead
                bc_ns, raw_ns, ratio = quick_launch_overhead()
                rep["launch_overhead"] = {"barecuda_ns": bc_ns, "raw_c_ns": raw_ns, "ratio": ratio}
            except Exception as e:   # noqa: BLE001
                rep["launch_overhead"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    return rep


def line(label, text):
    print(f"{label + ':':<{W}}{text}")


def print_report(rep):
    print(f"barecuda {rep['barecuda']}  ({rep['package']})")
    b = rep["build"]
    line("build", f"{b.get('mode', '?')}, Cython {b.get('cython', '?')}"
         + (f", {b['compiler']} {b.get('compile_args', '')}".rstrip() if b.get("compiler") else "")
         + ("" if b.get("source") == "barecuda._build_info" else f"  (read from the {b.get('source')})"))
    line("python", rep["python"])
    line("platform", rep["platform"])
    line("settings", ", ".join(f"{k}={v}" for k, v in rep["settings"].items()) or "none (no BARECUDA_*, "
         "CUDA_VISIBLE_DEVICES, CUDA_HOME or CUDA_PATH set)")
    line("peers", ", ".join(f"{k} {v}" for k, v in rep["peers"].items()) or "none of torch, CuPy, cuda-python")
    d, st = rep["driver"], rep["state"]
    if "path" in d:
        line("driver", f"CUDA {d['cuda']}" + (f", {d['library_version']}" if d.get("library_version") else "")
             + f"  {d['path']}")
    else:
        line("driver", "NOT USABLE")
        for ln in d["error"].splitlines():
            print(" " * W + ln)
    line("nvidia.ko", rep.get("kernel_module") or "not loaded (no /proc/driver/nvidia/version)")
    nodes = rep["device_nodes"]
    denied = [p for p, v in nodes.items() if v != "ok"]
    line("dev nodes", (f"{len(nodes)} /dev/nvidia* node(s)" + (f", NO ACCESS to {', '.join(denied)}" if denied
                                                                   else ", all accessible")) if nodes
         else "no /dev/nvidia* nodes" + (" (normal on Windows and WSL)" if sys.platform == "win32" else ""))
    line("state", f"{st['state']}: {st['message']}")
    if st["fix"]:
        line("fix", st["fix"])
    for dev in rep["devices"]:
        if "error" in dev:
            print(f"  [{dev['ordinal']}] cannot query: {dev['error']}")
            continue
        print(f"  [{dev['ordinal']}] {dev['name']}  cc {dev['cc']}  {dev['memory']}  {dev['sms']} SMs")
        print(f"      PCI {dev['pci']}  {dev['uuid']}")
        print(f"      clocks: {dev['clocks']}")
    topo = rep.get("topology")
    if topo:
        if "error" in topo:
            line("topology", f"n/a ({topo['error']})")
        else:
            import barecuda as bc
            lines = bc.topology_report(topo).splitlines()
            line("topology", lines[0])
            for ln in lines[1:]:
                print(" " * W + ln)
    for info in rep["libraries"].values():
        if info.get("path"):
            line(info["name"], f"{info['version'] or '?':<10} {info['path']}")
        else:
            line(info["name"], info["error"])
            print(" " * W + "fix: " + info["fix"])
    sc = rep.get("self_check")
    if sc:
        line("self-check", ("" if sc["ok"] is not False else "FAILED: ") + sc["message"])
    lo = rep.get("launch_overhead")
    if lo:
        if "error" in lo:
            print(f"launch overhead: n/a ({lo['error']})")
        else:
            print(f"launch overhead: barecuda kernel.launch {lo['barecuda_ns']:,.0f} ns vs raw C "
                  f"{lo['raw_c_ns']:,.0f} ns (ratio {lo['ratio']:.3f})")
    if rep["failed"]:
        line("status", "SELF-CHECK FAILED (exit 1)")
    elif st["state"] == "ok":
        line("status", "OK")
    else:
        line("status", f"no usable GPU ({st['state']}): nothing to check (exit 0)")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m barecuda",
        description="barecuda's doctor: the driver, devices, build, settings, libraries and peers; on a GPU a "
                    "self-check and the launch overhead against raw C.",
        epilog="Exit status: 0 when all is well or there is no GPU, 1 when a self-check fails.")
    ap.add_argument("--json", action="store_true", help="print the report as one JSON document (for bug reports)")
    ap.add_argument("--no-bench", action="store_true", help="skip the launch-overhead measurement")
    ap.add_argument("--no-self-check", action="store_true",
                    help="skip the self-check (a vector add on the first device, verified on the host): for a "
                         "driver whose kernels do not compute, such as a test double")
    args = ap.parse_args(argv)
    rep = collect(run_bench=not args.no_bench, run_self_check=not args.no_self_check)
    if args.json:
        json.dump(rep, sys.stdout, indent=1, default=str)
        print()
    else:
        print_report(rep)
    sys.stdout.flush()
    return 1 if rep["failed"] else 0


def _run():
    try:
        return main()
    except BrokenPipeError:
        # the reader went away (`python -m barecuda | head -3`): not an error; keep
        # the interpreter's final flush from raising again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(_run())
