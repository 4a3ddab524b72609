"""Memory rows: allocation, copy bandwidth, small copies, staged copies.

Sections (``--rows`` names; ``memory`` means all four): ``alloc`` (allocate + free
1 MiB, ns per pair, ratio to raw ``cuMemAllocAsync``+``cuMemFreeAsync``), ``copy``
(256 MiB host<->device, GB/s, ratio to the driver's pageable copy), ``smallcopy``
(pageable copies around the staging threshold, raw C vs ``copy_from``/``copy_to``)
and ``staging`` (``_baseline.bench_copy``: the staging pipeline's C entry points
against the driver's pageable and pinned copies, timed in C).
"""
from barecuda.bench.harness import (BATCH, NotAvailable, Row, median, now_ns, py_row, ratios, run_rounds, say,
                                    timed_to_sync, why)
from barecuda.bench.report import Section, fmt_x

ORDER = 20
ALLOC_SIZE = 1 << 20
SMALL_COPY_SIZES = (64 << 10, 1 << 20, 4 << 20, 16 << 20)


def _na_reason(e):
    return ("not installed (" + why(e) + ")") if isinstance(e, ImportError) else why(e)


# ------------------------------------------------------------------ alloc
def alloc_rows(ctx):
    """Allocation rows: raw C (sync and stream-ordered), barecuda, the peers."""
    from barecuda.bench import peers
    B, bc, size = ctx.B, ctx.bc, ALLOC_SIZE
    rows = []

    def c(key, label, fn):
        r = Row(key, label, "rawasync", section="alloc")
        r.stmt = "C loop"
        r.issue = lambda nb, bs: [t / bs for t in fn(nb, bs)]
        r.run = lambda n: fn(1, n)
        rows.append(r)

    c("rawalloc", "raw C cuMemAlloc + cuMemFree", lambda nb, bs: B.alloc_free(size, nb, bs))
    c("rawasync", "raw C cuMemAllocAsync + cuMemFreeAsync",
      lambda nb, bs: B.alloc_free_async(ctx.raw_stream, size, nb, bs))

    def bc_empty(ctx, size):
        if ctx.mem_error:
            raise NotAvailable(ctx.mem_error)
        return f"empty({size}, 'uint8')", {"empty": bc.empty}

    def bc_alloc(ctx, size):
        if not hasattr(bc, "alloc"):
            raise NotAvailable("barecuda.alloc is missing")
        return f"alloc({size})", {"alloc": bc.alloc}

    builders = [("bcempty", "barecuda bc.empty(1 MiB) + drop", bc_empty),
                ("bcalloc", "barecuda bc.alloc(1 MiB) + drop", bc_alloc)] + peers.ALLOC_PEERS
    for key, label, build in builders:
        try:
            stmt, ns = build(ctx, size)
            r = py_row(key, label, stmt, dict(ns, sync=B.ctx_sync), "sync()", ref="rawasync", roundtrip=False,
                       section="alloc")
            r.thr = None
        except Exception as e:   # noqa: BLE001
            r = Row(key, label, "rawasync", section="alloc")
            r.mark_na(_na_reason(e))
        rows.append(r)
    return rows


def alloc_section(ctx):
    say("barecuda.bench: allocation rows...")
    st = ctx.settings
    rows = alloc_rows(ctx)
    run_rounds(rows, st.mem_rounds, st.mem_batches, 0, 0, ctx.B.ctx_sync, label="alloc")
    return Section.of_issue("alloc", "alloc + free 1 MiB (ns per pair)", [("ns", 8), ("x async", 8)], rows,
                            ratios(rows))


# ------------------------------------------------------------------ copy
class CopyRow(Row):
    """A copy row: ``once()`` times one copy up to a context sync; ``gbs`` is the
    median rate over the rounds."""

    def __init__(self, key, label, direction, ref):
        super().__init__(key, label, ref, section="copy")
        self.direction = direction
        self.once = None
        self.times = []
        self.gbs = None

    def as_json(self, rat=None):
        return {"key": self.key, "label": self.label, "ref": self.ref, "direction": self.direction,
                "na": self.na, "gb_per_s": self.gbs, "samples_ns": self.times}


def copy_rows(ctx):
    """Copy rows of ``settings.copy_bytes``, pinned and pageable, raw C, barecuda and
    the peers; each ``once()`` is one copy timed up to a context sync."""
    from barecuda.bench import peers
    B, bc, n = ctx.B, ctx.bc, ctx.settings.copy_bytes
    rows = []
    try:
        import numpy as np
    except ImportError:
        r = CopyRow("copy", "copies", "-", None)
        r.mark_na("numpy not installed")
        return [r]
    src = np.ones(n, dtype=np.uint8)            # pageable, pages touched
    dst = np.zeros(n, dtype=np.uint8)
    dptr = B.mem_alloc(n)
    hpin = B.host_alloc(n)
    state = {}
    ctx.keep.append((src, dst, state))
    ctx.keep.append(_Freed(lambda: (B.mem_free(dptr), B.host_free(hpin))))

    def add(key, label, direction, ref, build):
        r = CopyRow(key, label, direction, ref)
        try:
            r.once = build()
            r.once()       # warm-up
        except Exception as e:   # noqa: BLE001
            r.mark_na(_na_reason(e))
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

    def need_bc():
        if ctx.mem_error:
            raise NotAvailable(ctx.mem_error)

    def buf():
        need_bc()
        if "buf" not in state:
            state["buf"] = bc.empty(n, "uint8")
        return state["buf"]

    def pinned():
        need_bc()
        if "pin" not in state:
            pb = bc.PinnedBuffer(n)
            np.frombuffer(pb, dtype=np.uint8)[:] = 1     # touch every page
            state["pin"] = pb
        return state["pin"]

    def timed(make):
        def build():
            need_bc()
            return timed_to_sync(B, make())
        return build

    add("bc_to_device", "barecuda bc.to_device(numpy), pageable", "H2D", "rawh2d_page",
        timed(lambda: lambda: bc.to_device(src)))
    add("bc_copy_from", "barecuda buf.copy_from(numpy), pageable", "H2D", "rawh2d_page",
        timed(lambda: (lambda b: lambda: b.copy_from(src))(buf())))
    add("bc_copy_from_pin", "barecuda buf.copy_from(PinnedBuffer)", "H2D", "rawh2d_page",
        timed(lambda: (lambda b, p: lambda: b.copy_from(p))(buf(), pinned())))
    add("bc_to_numpy", "barecuda buf.to_numpy(), pageable", "D2H", "rawd2h_page",
        timed(lambda: (lambda b: lambda: b.to_numpy())(buf())))
    add("bc_copy_to", "barecuda buf.copy_to(numpy), pageable", "D2H", "rawd2h_page",
        timed(lambda: (lambda b: lambda: b.copy_to(dst))(buf())))
    add("bc_copy_to_pin", "barecuda buf.copy_to(PinnedBuffer)", "D2H", "rawd2h_page",
        timed(lambda: (lambda b, p: lambda: b.copy_to(p))(buf(), pinned())))
    for key, label, direction, ref, build in peers.COPY_PEERS:
        add(key, label, direction, ref, lambda b=build: b(ctx, src, state))
    return rows


class _Freed:
    """Runs ``fn`` when the context drops it (raw copy buffers)."""

    def __init__(self, fn):
        self.fn = fn

    def __del__(self):
        try:
            self.fn()
        except Exception:   # noqa: BLE001 -- a destructor never raises
            pass


def copy_section(ctx):
    say("barecuda.bench: copy rows...")
    st = ctx.settings
    rows = copy_rows(ctx)
    live = [r for r in rows if not r.na and r.once]
    t_start = now_ns()
    for rnd in range(st.copy_rounds):
        for r in live:
            if r.na:
                continue
            try:
                r.times.append(r.once())
            except Exception as e:   # noqa: BLE001
                r.mark_na(why(e))
        if rnd == 0:
            say(f"  copy: round 1/{st.copy_rounds} done, ~{(now_ns() - t_start) * 1e-9 * st.copy_rounds:.0f} s "
                "for all rounds")
    for r in rows:
        t = median(r.times)
        r.gbs = (st.copy_bytes / t) if t else None
        if r.gbs is None and not r.na:
            r.mark_na("not measured")
    by_key = {r.key: r for r in rows}
    sec = Section("copy", "copy %d MiB (GB/s)" % (st.copy_bytes >> 20),
                  [("dir", 4), ("GB/s", 7), ("x raw pageable", 15)], data=[r.as_json() for r in rows])
    for r in rows:
        if r.na:
            sec.add(r.label, f"n/a ({r.na})")
            continue
        ref = by_key.get(r.ref)
        x = (r.gbs / ref.gbs) if (ref is not None and not ref.na and ref.gbs) else None
        sec.add(r.label, [r.direction, f"{r.gbs:.2f}", fmt_x(x)])
    return sec


# ------------------------------------------------------------------ small copies
def small_copies(ctx):
    """Pageable copies around the staging threshold: the driver's own copy (raw C,
    timed in C) against ``copy_from``/``copy_to`` (timed from Python, the call a user
    writes). Below the threshold barecuda takes the driver's path, so the ratio is the
    Python call's cost; above it, staging. Rows alternate over many rounds; medians."""
    B, bc = ctx.B, ctx.bc
    if ctx.mem_error:
        raise NotAvailable(ctx.mem_error)
    import numpy as np
    from barecuda import _staging
    threshold = _staging.configure()["threshold"]
    rounds = 21 if ctx.settings.quick else 101
    out = []
    for n in SMALL_COPY_SIZES:
        src = np.ones(n, dtype=np.uint8)
        dst = np.zeros(n, dtype=np.uint8)
        dptr = B.mem_alloc(n)
        buf = bc.empty(n, "uint8")
        ctx.keep.append((src, dst, buf))
        fns = [lambda: B.memcpy_htod(dptr, src, n, 1)[0], timed_to_sync(B, lambda: buf.copy_from(src)),
               lambda: B.memcpy_dtoh(dst, dptr, n, 1)[0], timed_to_sync(B, lambda: buf.copy_to(dst))]
        times = [[] for _ in fns]
        try:
            for f in fns:
                f()   # warm-up (builds the stager above the threshold)
            for _ in range(rounds):
                for i, f in enumerate(fns):
                    times[i].append(f())
        finally:
            B.mem_free(dptr)
        med = [median(t) for t in times]
        for d, raw, ours in (("H2D", med[0], med[1]), ("D2H", med[2], med[3])):
            out.append({"bytes": n, "dir": d, "raw_ns": raw, "bc_ns": ours, "staged": n >= threshold,
                        "x": (ours / raw) if raw else None})
    return out


def smallcopy_section(ctx):
    say("barecuda.bench: small copies...")
    res = small_copies(ctx)
    sec = Section("small_copy", "pageable copy, us per copy (raw C vs copy_from/to)",
                  [("dir", 4), ("raw C", 8), ("barecuda", 9), ("x raw", 6)], data=res)
    for c in res:
        size = f"{c['bytes'] >> 20} MiB" if c["bytes"] >= 1 << 20 else f"{c['bytes'] >> 10} KiB"
        sec.add(f"  {size}{' (staged)' if c['staged'] else ' (driver path)'}",
                [c["dir"], f"{c['raw_ns'] / 1e3:.1f}", f"{c['bc_ns'] / 1e3:.1f}", fmt_x(c["x"])])
    return sec


# ------------------------------------------------------------------ staging, raw
def staging_section(ctx):
    """``_baseline.bench_copy`` both ways: staged vs driver pageable vs pinned, in C."""
    say("barecuda.bench: staged copies (bench_copy)...")
    n = ctx.settings.copy_bytes
    reps = 3 if ctx.settings.quick else 7
    res = {}
    sec = Section("staging", "staged copy %d MiB, timed in C (GB/s)" % (n >> 20),
                  [("staged", 7), ("pageable", 9), ("pinned", 7), ("x pageable", 11)], data=res)
    for d in ("htod", "dtoh"):
        try:
            staged, plain, pin = ctx.B.bench_copy(d, n, reps)
            res[d] = {"staged": staged, "pageable": plain, "pinned": pin, "x": staged / plain if plain else None}
            sec.add(d, [f"{staged:.2f}", f"{plain:.2f}", f"{pin:.2f}", fmt_x(res[d]["x"])])
        except Exception as e:   # noqa: BLE001
            res[d] = {"na": why(e)}
            sec.add(d, f"n/a ({why(e)})")
    return sec


SECTIONS = {"alloc": alloc_section, "copy": copy_section, "smallcopy": smallcopy_section,
            "staging": staging_section}
ALIASES = {"memory": ("alloc", "copy", "smallcopy", "staging")}
