"""``python -m barecuda.kernels warmup | list``.

``warmup`` loads every kernel of the table on the current GPU (prebuilt package code,
else the compile cache, else NVRTC, whose result goes into the cache), with a progress
bar; afterwards a serving process finds everything in the package or the cache and
never compiles. ``list`` prints the table: source, specialization, entry points, and
(with ``--where``) where each would load from on this machine.
"""
import sys
import time


def _bar(done, total, t0, what):
    width = 30
    n = int(width * done / total) if total else width
    sys.stderr.write(f"\r[{'#' * n}{'.' * (width - n)}] {done}/{total} {time.monotonic() - t0:5.1f}s {what[:48]:<48}")
    sys.stderr.flush()


def warmup(device=None, quiet=False, sources=None, jobs=None):
    """Load every specialization in the table (of ``sources`` only, if given) on
    ``device``, ``jobs`` at a time (default: one per CPU, at most 16: NVRTC compiles run
    without the GIL, so the ones that need compiling compile in parallel); returns
    {origin: count}."""
    import os
    from concurrent.futures import ThreadPoolExecutor, as_completed
    import barecuda as bc
    from barecuda.kernels import _registry as R
    dev = bc.Device(device if device is not None else 0)
    cc = dev.compute_capability
    cc = cc() if callable(cc) else cc
    # an arch-specific module (the sm_90a GEMM) is loaded only where its family launches it
    specs = [t for t in R.table() if (sources is None or t[0] in sources)
             and R.arch_specific(t[2]) in (None, cc[0] * 10 + cc[1])]
    jobs = max(1, int(jobs) if jobs else min(16, os.cpu_count() or 1))
    t0 = time.monotonic()
    counts = {}

    def load(spec):
        source, names, defines = spec
        for n in names:
            R.get(source, n, defines, dev)
        return spec, R.origin(source, defines, dev)

    if not quiet:
        _bar(0, len(specs), t0, "")
    with ThreadPoolExecutor(jobs) as ex:
        futures = [ex.submit(load, spec) for spec in specs]
        try:
            for i, f in enumerate(as_completed(futures), 1):
                (source, _, defines), o = f.result()
                counts[o] = counts.get(o, 0) + 1
                if not quiet:
                    _bar(i, len(specs), t0, source + "".join(f" {k}={v}" for k, v in defines))
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    if not quiet:
        sys.stderr.write("\n")
    return counts


def _cc10(ordinal):
    import barecuda as bc
    cc = bc.Device(ordinal).compute_capability
    cc = cc() if callable(cc) else cc
    return cc[0] * 10 + cc[1]


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m barecuda.kernels", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warmup", help="load (compile if needed) every kernel for this GPU")
    w.add_argument("--device", type=int, default=0)
    w.add_argument("--quiet", action="store_true")
    w.add_argument("--jobs", type=int, default=None, help="compiles at a time (default: CPUs, at most 16)")
    ls = sub.add_parser("list", help="the kernel table")
    ls.add_argument("--where", action="store_true", help="also load each on device 0 and say from where")
    a = p.parse_args(argv)
    if a.cmd == "warmup":
        t0 = time.monotonic()
        counts = warmup(a.device, a.quiet, jobs=a.jobs)
        n = sum(counts.values())
        how = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        print(f"warmed up {n} kernel specializations on device {a.device} in {time.monotonic() - t0:.1f}s ({how})")
        return 0
    from barecuda.kernels import _registry as R
    specs = R.table()
    for source, names, defines in specs:
        d = " ".join(f"{k}={v}" for k, v in defines) or "-"
        where = ""
        sa = R.arch_specific(defines)
        if a.where and sa is not None and sa != _cc10(0):
            where = f"  [sm_{sa}a only]"
        elif a.where:
            for n in names:
                R.get(source, n, defines, 0)
            where = f"  [{R.origin(source, defines, 0)}]"
        print(f"{source:16} {d:24} {len(names):3} entries: {', '.join(names)}{where}")
    print(f"{len(specs)} specializations, {sum(len(n) for _, n, _ in specs)} entry points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
