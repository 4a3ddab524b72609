"""Prebuilt kernels for the wheel: every specialization in the registry's table,
compiled with NVRTC to cubins for each architecture and to PTX of the oldest
supported ISA, written to a package-data folder with a manifest.

    python -m barecuda.kernels._prebuild [--out DIR] [--archs 80,86,89,90,100,120] [--jobs N]

(``BARECUDA_PREBUILD_ARCHS=80,90`` sets the default architectures, e.g. for setup.py's call.)

Run at wheel-build time by setup.py (when NVRTC is importable there, or with
``BARECUDA_PREBUILD_KERNELS=1``); the registry loads these files before the compile
cache. Files are named by the specialization digest (``_registry.digest``: the
sources, headers, options and defines), so code built from other sources is never
loaded. PTX is compiled for ``compute_80`` and its ``.version`` is set to 8.0, the
ISA of CUDA 12.0, the oldest driver barecuda supports; the kernels use nothing newer
(the test suite checks every PTX text says 8.0 after lowering and still loads).
A specialization with a ``("BC_SM_A", 90)`` define (the wgmma GEMM) gets one cubin,
built for ``sm_90a`` (filed as sm_90), and PTX for ``compute_90a`` (also ISA 8.0).
"""
import json
import os
import sys
import time

from barecuda.kernels import _registry as R

# cubins: the common data-centre and desktop architectures NVRTC 12.x/13.x both know
DEFAULT_ARCHS = (80, 86, 89, 90, 100, 120)
PTX_ARCH = "compute_80"
PTX_ISA = (8, 0)


def lower_ptx_version(ptx, isa=PTX_ISA):
    """``ptx`` (bytes) with its ``.version`` line set to ``isa`` when it says newer."""
    out = []
    done = False
    for line in ptx.split(b"\n"):
        s = line.strip()
        if not done and s.startswith(b".version"):
            parts = s.split()
            try:
                major, minor = (int(v) for v in parts[1].split(b"."))
            except (IndexError, ValueError):
                raise ValueError(f"unreadable PTX version line {line!r}") from None
            if (major, minor) > isa:
                line = b".version %d.%d" % isa
            done = True
        out.append(line)
    if not done:
        raise ValueError("PTX without a .version line")
    return b"\n".join(out)


def _one(source, defines, target, arch):
    oc = R.compile_code(source, defines, target=target, arch=arch)
    log = (oc.log or "").strip()
    code = oc.code if target == "cubin" else lower_ptx_version(oc.code if isinstance(oc.code, bytes) else oc.code.encode())
    return code, log


def build(out, archs=DEFAULT_ARCHS, *, ptx=True, jobs=None, specs=None, progress=True):
    """Compile ``specs`` (default: the whole table) into folder ``out``; returns the manifest."""
    from concurrent.futures import ThreadPoolExecutor
    from barecuda._nvrtc import nvrtc_archs, nvrtc_version
    specs = R.table() if specs is None else specs
    have = set(nvrtc_archs())
    archs = [a for a in archs if a in have]
    os.makedirs(out, exist_ok=True)
    work = []
    entries = {}
    for source, names, defines in specs:
        dg = R.digest(source, tuple(defines))
        sa = R.arch_specific(defines)
        if sa is not None:
            # an arch-specific module (wgmma: sm_90a): one cubin, for that architecture only, filed
            # under its plain name (the registry picks it on that architecture alone), and its
            # compute_90a PTX (the kernels' parameter types; no other architecture loads it)
            cub = [a for a in archs if a == sa]
            entries[dg] = {"source": source, "defines": [list(d) for d in defines], "names": list(names),
                           "cubins": cub, "ptx": bool(ptx)}
            for a in cub:
                work.append((dg, source, tuple(defines), "cubin", f"sm_{a}a", f"{dg}.sm_{a}.cubin"))
            if ptx:
                work.append((dg, source, tuple(defines), "ptx", f"compute_{sa}a", f"{dg}.ptx"))
            continue
        entries[dg] = {"source": source, "defines": [list(d) for d in defines], "names": list(names),
                       "cubins": list(archs), "ptx": bool(ptx)}
        for a in archs:
            work.append((dg, source, tuple(defines), "cubin", f"sm_{a}", f"{dg}.sm_{a}.cubin"))
        if ptx:
            work.append((dg, source, tuple(defines), "ptx", PTX_ARCH, f"{dg}.ptx"))
    jobs = jobs or min(8, os.cpu_count() or 1)
    t0 = time.monotonic()
    done = 0
    warnings = []

    def task(w):
        dg, source, defines, target, arch, fn = w
        code, log = _one(source, defines, target, arch)
        tmp = os.path.join(out, fn + ".part")
        with open(tmp, "wb") as f:
            f.write(code)
        os.replace(tmp, os.path.join(out, fn))
        return w, log

    with ThreadPoolExecutor(jobs) as ex:
        for w, log in ex.map(task, work):
            done += 1
            if log:
                warnings.append(f"{w[1]} {w[2]} {w[4]}: {log}")
            if progress:
                _bar(done, len(work), time.monotonic() - t0, f"{w[1]} {w[4]}")
    if progress:
        sys.stderr.write("\n")
    manifest = {"format": 1, "nvrtc": list(nvrtc_version()), "ptx_isa": list(PTX_ISA), "ptx_arch": PTX_ARCH,
                "entries": entries}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    # files of specializations no longer in the table
    keep = {w[5] for w in work} | {"manifest.json"}
    for fn in os.listdir(out):
        if fn not in keep:
            os.unlink(os.path.join(out, fn))
    for w in warnings:
        sys.stderr.write(f"warning: {w}\n")
    return manifest


def _bar(done, total, secs, what):
    width = 30
    n = int(width * done / total) if total else width
    sys.stderr.write(f"\r[{'#' * n}{'.' * (width - n)}] {done}/{total} {secs:5.1f}s {what[:40]:<40}")
    sys.stderr.flush()


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m barecuda.kernels._prebuild", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=R.PREBUILT, help="folder (default: the package's prebuilt/)")
    p.add_argument("--archs", default=os.environ.get("BARECUDA_PREBUILD_ARCHS") or ",".join(map(str, DEFAULT_ARCHS)),
                   help="cubin architectures, e.g. 80,90 (default: $BARECUDA_PREBUILD_ARCHS or %(default)s)")
    p.add_argument("--no-ptx", action="store_true")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    archs = tuple(int(x) for x in a.archs.split(",") if x.strip())
    m = build(a.out, archs, ptx=not a.no_ptx, jobs=a.jobs, progress=not a.quiet)
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"prebuilt {len(m['entries'])} specializations for sm_{', sm_'.join(map(str, archs))} + PTX "
          f"{PTX_ISA[0]}.{PTX_ISA[1]} into {a.out} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
