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


def warmup(device=None, quiet=False, sources=None):
    """Load every specialization in the table (of ``sources`` only, if given) on
    ``device``; returns {origin: count}."""
    import barecuda as bc
    from barecuda.kernels import _registry as R
    dev = bc.Device(device if device is not None else 0)
    specs = [t for t in R.table() if sources is None or t[0] in sources]
    t0 = time.monotonic()
    counts = {}
    for i, (source, names, defines) in enumerate(specs):
        label = source + "".join(f" {k}={v}" for k, v in defines)
        if not quiet:
            _bar(i, len(specs), t0, label)
        for n in names:
            R.get(source, n, defines, dev)
        o = R.origin(source, defines, dev)
        counts[o] = counts.get(o, 0) + 1
    if not quiet:
        _bar(len(specs), len(specs), t0, "done")
        sys.stderr.write("\n")
    return counts


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m barecuda.kernels", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("warmup", help="load (compile if needed) every kernel for this GPU")
    w.add_argument("--device", type=int, default=0)
    w.add_argument("--quiet", action="store_true")
    ls = sub.add_parser("list", help="the kernel table")
    ls.add_argument("--where", action="store_true", help="also load each on device 0 and say from where")
    a = p.parse_args(argv)
    if a.cmd == "warmup":
        t0 = time.monotonic()
        counts = warmup(a.device, a.quiet)
        n = sum(counts.values())
        how = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        print(f"warmed up {n} kernel specializations on device {a.device} in {time.monotonic() - t0:.1f}s ({how})")
        return 0
    from barecuda.kernels import _registry as R
    specs = R.table()
    for source, names, defines in specs:
        d = " ".join(f"{k}={v}" for k, v in defines) or "-"
        where = ""
        if a.where:
            for n in names:
                R.get(source, n, defines, 0)
            where = f"  [{R.origin(source, defines, 0)}]"
        print(f"{source:16} {d:24} {len(names):3} entries: {', '.join(names)}{where}")
    print(f"{len(specs)} specializations, {sum(len(n) for _, n, _ in specs)} entry points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
