"""Probe the host side of pageable copies on a GPU machine (a developer's tool).

Prints, for 256 MiB (``--mib``):
  * the machine: usable cores, NUMA nodes, transparent huge pages;
  * reference rates (``barecuda.bench._baseline.bench_copy``): staged, driver pageable, pinned;
  * a sweep of staging parameters (threads x chunk size x chunks x streaming stores)
    for ``buf.copy_to(numpy)`` and ``buf.copy_from(numpy)`` into/from touched arrays;
  * what a fresh destination costs: N Python threads copying into a new ``np.empty``
    (first-touch page faults) against a touched one, with and without
    ``madvise(MADV_HUGEPAGE)``, and ``buf.to_numpy()`` itself.
Medians of ``--reps`` copies. Nothing persists: the staging defaults are restored.

Usage: python -m barecuda.bench.staging_sweep [--mib 256] [--reps 7] [--quick]
"""
import argparse
import mmap
import os
import statistics
import sys
import threading
import time

import numpy as np

import barecuda as bc
from barecuda import _staging
from barecuda.bench._baseline import bench_copy
from barecuda.bench.harness import now_ns   # the one clock (include/barecuda/bc_clock.h)

MiB = 1 << 20


def median_time(fn, reps):
    fn()   # warm-up
    ts = []
    for _ in range(reps):
        t0 = now_ns()
        fn()
        ts.append(now_ns() - t0)
    return statistics.median(ts)


def gbps(n, ns):
    return n / ns if ns else float("inf")


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def parallel_copy(dst, src, nthreads):
    """np.copyto of equal slices in nthreads threads (numpy releases the GIL)."""
    n = dst.shape[0]
    part = (n + nthreads - 1) // nthreads
    bounds = [(i * part, min(n, (i + 1) * part)) for i in range(nthreads)]
    ths = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds[1:]]
    for t in ths:
        t.start()
    a, b = bounds[0]
    np.copyto(dst[a:b], src[a:b])
    for t in ths:
        t.join()


def huge_empty(n):
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(m, dtype=np.uint8)


def idle_probe(n, reps):
    """Does a copy that follows an idle pause (staging threads asleep, caches cold)
    cost more than one that follows another copy?"""
    src = np.ones(n, dtype=np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    buf = bc.empty(n, "uint8")
    pin = bc.PinnedBuffer(n)
    np.frombuffer(pin, dtype=np.uint8)[:] = 1
    rows = (("copy_from(Pinned)", lambda: buf.copy_from(pin)),   # DMA only: GPU/link side
            ("to_device(numpy)", lambda: bc.to_device(src)), ("copy_from(numpy)", lambda: buf.copy_from(src)),
            ("copy_to(numpy)", lambda: buf.copy_to(dst)), ("to_numpy()", lambda: buf.to_numpy()))
    for spin in (50, 500, 2000):
        _staging.configure(spin_us=spin)
        print(f"spin_us {spin}")
        for pause in (0.0, 0.2):
            for label, fn in rows:
                fn()
                ts = []
                for _ in range(reps):
                    if pause:
                        time.sleep(pause)
                    t0 = now_ns()
                    fn()
                    bc.Device(0).synchronize()
                    ts.append(now_ns() - t0)
                print(f"  pause {pause:.1f} s  {label:<18} {gbps(n, statistics.median(ts)):6.1f} GB/s"
                      f"  (min {gbps(n, max(ts)):5.1f}, max {gbps(n, min(ts)):5.1f})")
    return 0


def main():
    ap = argparse.ArgumentParser(prog="python -m barecuda.bench.staging_sweep")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--idle", action="store_true",
                    help="only: each copy back to back vs after 200 ms idle (threads asleep)")
    a = ap.parse_args()
    n = a.mib * MiB
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    nodes = [d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")] \
        if os.path.isdir("/sys/devices/system/node") else []
    print(f"cores {cores}, NUMA nodes {len(nodes)}, THP enabled: "
          f"{read('/sys/kernel/mm/transparent_hugepage/enabled')}, defrag: "
          f"{read('/sys/kernel/mm/transparent_hugepage/defrag')}, numpy {np.__version__}")
    dev = bc.Device(0)
    print(f"device {dev.name}")
    default = _staging.configure()
    if a.idle:
        return idle_probe(n, a.reps)
    for d in ("dtoh", "htod"):
        st, raw, pin = bench_copy(d, n, a.reps)
        print(f"ref {d}: staged {st:6.1f}  driver pageable {raw:6.1f}  pinned {pin:6.1f} GB/s"
              f"  (staged/raw {st / raw:4.2f}x)")
    src = (np.arange(n, dtype=np.uint64).view(np.uint8)[:n] * 7).astype(np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    buf = bc.to_device(src)
    thr = sorted({t for t in (4, 6, 8, 12, 16, 24) if t <= cores} | {min(cores, 8)})
    chunk_sizes = (4 * MiB, 8 * MiB, 16 * MiB)
    chunk_counts = (4, 8)
    if a.quick:
        chunk_sizes, chunk_counts = (8 * MiB, 16 * MiB), (4, 8)
    for label, fn, ntkey in (("D2H copy_to(numpy)", lambda: buf.copy_to(dst), "nt_dtoh"),
                             ("H2D copy_from(numpy)", lambda: buf.copy_from(src), "nt_htod")):
        print(f"\n{label}, GB/s (threads x chunk MiB x chunks, nt on / off)")
        rows = []
        for t in thr:
            for cb in chunk_sizes:
                for k in chunk_counts:
                    res = []
                    for nt in (True, False):
                        _staging.configure(threads=t, chunk_bytes=cb, chunks=k, **{ntkey: nt})
                        res.append(gbps(n, median_time(fn, a.reps)))
                    rows.append((t, cb // MiB, k, res[0], res[1]))
                    print(f"  T={t:2d} chunk={cb // MiB:2d} K={k}:  nt {res[0]:6.1f}   plain {res[1]:6.1f}")
        best = max(rows, key=lambda r: max(r[3], r[4]))
        print(f"  best: T={best[0]} chunk={best[1]} MiB K={best[2]} nt={best[3] >= best[4]}"
              f" {max(best[3], best[4]):.1f} GB/s")
        if not np.array_equal(dst, src):
            print("  !! copy_to result differs from the source")
        _staging.configure(**{k: v for k, v in default.items()})
    if not np.array_equal(buf.to_numpy(), src):
        print("!! to_numpy result differs from the source")

    print("\nfresh destination (first-touch) vs touched, np.copyto in T threads, GB/s")
    for t in sorted({1, 2, 4, 8, 16, cores} & set(range(1, cores + 1))):
        touched = gbps(n, median_time(lambda: parallel_copy(dst, src, t), a.reps))
        fresh = gbps(n, median_time(lambda: parallel_copy(np.empty(n, np.uint8), src, t), a.reps))
        huge = gbps(n, median_time(lambda: parallel_copy(huge_empty(n), src, t), a.reps))
        print(f"  T={t:2d}: touched {touched:6.1f}  fresh np.empty {fresh:6.1f}  fresh mmap+MADV_HUGEPAGE {huge:6.1f}")
    if hasattr(mmap, "MAP_POPULATE"):
        pop = gbps(n, median_time(lambda: mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                                                    | mmap.MAP_POPULATE), a.reps))
        print(f"  mmap(MAP_POPULATE) alone: {pop:6.1f} GB/s")
    print(f"\nto_numpy(): {gbps(n, median_time(lambda: buf.to_numpy(), a.reps)):6.1f} GB/s;"
          f" copy_to(fresh np.empty): {gbps(n, median_time(lambda: buf.copy_to(np.empty(n, np.uint8)), a.reps)):6.1f};"
          f" copy_to(fresh huge mmap): {gbps(n, median_time(lambda: buf.copy_to(huge_empty(n)), a.reps)):6.1f};"
          f" copy_to(touched): {gbps(n, median_time(lambda: buf.copy_to(dst), a.reps)):6.1f}")
    print("staging stats:", {k: v for k, v in _staging.stats().items() if k != "config"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
