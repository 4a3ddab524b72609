"""Launch rows: the CPU cost of a kernel launch, raw C vs barecuda vs the peers.

Sections (``--rows`` names): ``launch`` (issue / throughput / round trip per launch,
ratios to the raw C row with the same argument count), ``threads`` (launches/s of 1
vs 4 threads on their own streams, GIL held and released) and ``alloccheck``
(``sys.getallocatedblocks()`` and ``tracemalloc`` growth over 100,000 launches, minus
the same loop around ``pass``: 0 means nothing allocated per launch).
"""
import gc
import importlib
import sys
import threading
import tracemalloc

from barecuda.bench.context import K0, K4, K4P, K16
from barecuda.bench.harness import (BATCH, NotAvailable, Row, c_row, compile_loops, median, na_row, now_ns,
                                    py_row, ratios, round_ratio, run_rounds, say, why)
from barecuda.bench.report import Section, fmt_ns, fmt_x

ORDER = 10

BC_LAUNCH_ROWS = [
    ("bc0", "barecuda kernel.launch, 0 args", "raw0"),
    ("bc4", "barecuda kernel.launch, 4 args", "raw4"),
    ("bc4p", "barecuda kernel.launch, 4 DeviceBuffers", "raw4p"),
    ("torch4p", "barecuda kernel.launch, 4 torch tensors", "raw4pts"),
    ("cupy4p", "barecuda kernel.launch, 4 CuPy arrays", "raw4pcs"),
    ("bc16", "barecuda kernel.launch, 16 args", "raw16"),
    ("plan4", "barecuda plan(), 4 args", "raw4"),
    ("all4", f"barecuda launch_all({BATCH} plans), per launch", "raw4"),
    ("plist4", f"barecuda PlanList({BATCH})(), per launch", "raw4"),
    ("bcex4", "barecuda LaunchConfig(priority) launch, 4 args", "rawex4"),
    ("bcexplan4", "barecuda bind_config(LaunchConfig) plan(), 4 args", "rawex4"),
    ("gilrel4", "barecuda kernel.launch, GIL released, 4 args", "raw4"),
    ("gilheld4", "barecuda kernel.launch, GIL held, 4 args", "raw4"),
]
_LABEL = {k: (label, ref) for k, label, ref in BC_LAUNCH_ROWS}
K4_STMT = "k.launch(1, 1, o, i, 7, 1.5, stream=s)"
K4P_STMT = "k.launch(1, 1, a, b, c, d, stream=s)"


def gil_switch(bc):
    """The launch GIL switch: ``barecuda.set_launch_releases_gil`` (or, in builds
    before it was public, ``barecuda._launch``'s). Returns (name, set, get) or
    (reason, None, None)."""
    for mod_name in ("barecuda", "barecuda._launch"):
        mod = importlib.import_module(mod_name)
        setter = getattr(mod, "set_launch_releases_gil", None)
        getter = getattr(mod, "launch_releases_gil", None)
        if callable(setter) and callable(getter):
            return f"{mod_name}.set_launch_releases_gil", setter, getter
    return "no set_launch_releases_gil in barecuda or barecuda._launch", None, None


def k4_ns(ctx, stream=None):
    return {"k": ctx.kern[K4], "s": stream or ctx.stream, "o": ctx.bufs[0], "i": ctx.bufs[1]}


def _bc_row(key, build):
    """Row ``key`` of BC_LAUNCH_ROWS from build() -> (stmt, ns, per); n/a on failure."""
    label, ref = _LABEL[key]
    try:
        stmt, ns, per = build()
        return py_row(key, label, stmt, ns, "s.synchronize()", ref=ref, per=per, roundtrip=per == 1)
    except Exception as e:   # noqa: BLE001 -- a row that cannot be built is n/a, with the reason
        return na_row(key, label, ref, why(e))


# The torch and CuPy rows' tensors and stream, made once per run and shared by the
# library's barecuda row and its raw C rows (peers.torch_tensor_args / cupy_array_args).
LIB_ARGS = {"torch": "torch_tensor_args", "cupy": "cupy_array_args"}


def lib_args(ctx, lib):
    """``(args, stream, sync, setup, teardown)`` of ``lib`` for this run (raises what the
    library's helper raised, each time it is asked)."""
    from barecuda.bench import peers as peer_rows
    memo = ctx.extra.setdefault("lib_args", {})
    if lib not in memo:
        try:
            memo[lib] = getattr(peer_rows, LIB_ARGS[lib])(ctx)
        except Exception as e:   # noqa: BLE001 -- kept and re-raised: the rows become n/a with it
            memo[lib] = e
    if isinstance(memo[lib], Exception):
        raise memo[lib]
    return memo[lib]


def lib_stream_handle(stream):
    """The raw handle of a torch (``cuda_stream``) or CuPy (``ptr``) stream."""
    h = getattr(stream, "cuda_stream", None)
    return h if h is not None else stream.ptr


def tensor_rows(ctx, peers=True):
    """``kernel.launch`` of the 4-pointer kernel with 4 DeviceBuffers, 4 torch tensors
    and 4 CuPy arrays (issue 12's tensors-on-the-fast-path rows). The torch/CuPy rows
    launch on that library's stream while it is the library's current stream
    (``with torch.cuda.stream(s): k.launch(..., stream=s)``), so the stream rule orders
    nothing and the row measures what reading the tensors costs; each is n/a when the
    library (with CUDA) is missing or ``--no-peers``. Their reference is raw C with the
    same 4 pointers on the same stream (``raw4pts``, ``raw4pcs``: the libraries' streams
    are non-blocking, which raw C launches onto for 59-117 ns less than onto a blocking
    one such as ``raw4p``'s, 2x H200 21:40)."""
    from barecuda.bench import peers as peer_rows
    k = ctx.kern[K4P]
    s = ctx.stream
    rows = [_bc_row("bc4p", lambda: (K4P_STMT, dict(zip("abcd", ctx.bufs[:4]), k=k, s=s), 1))]
    for key, lib in (("torch4p", "torch"), ("cupy4p", "cupy")):
        label, ref = _LABEL[key]
        if not peers:
            rows.append(na_row(key, label, ref, "--no-peers: torch and CuPy are not imported"))
            continue
        try:
            args, stream, sync, setup, teardown = lib_args(ctx, lib)
            r = py_row(key, label, K4P_STMT, dict(zip("abcd", args), k=k, s=stream), sync, ref=ref)
        except Exception as e:   # noqa: BLE001 -- a missing peer is an n/a row, with the reason
            rows.append(na_row(key, label, ref, peer_rows.not_installed(e)))
            continue
        r.setup, r.teardown = setup, teardown
        rows.append(r)
    return rows


def build_launch_rows(ctx, peers=True):
    """Every launch row: raw C, barecuda's forms, and (``peers``) the peers'."""
    B, s, bc = ctx.B, ctx.stream, ctx.bc
    rows = [c_row(B, f"raw{n}", f"raw C cuLaunchKernel, {n} args", ctx.raw_fn[k], 1, 1, ctx.raw_params[k],
                  ctx.raw_stream) for k, n in ((K0, 0), (K4, 4), (K16, 16))]
    rows.append(c_row(B, "raw4p", "raw C cuLaunchKernel, 4 pointer args", ctx.raw_fn[K4P], 1, 1,
                      ctx.raw_params[K4P], ctx.raw_stream))
    rows.append(c_row(B, "rawex4", "raw C cuLaunchKernelEx (priority), 4 args", ctx.raw_fn[K4], 1, 1,
                      ctx.raw_params[K4], ctx.raw_stream, ex={"priority": 0}))
    if ctx.bc_error:
        rows += [na_row(key, label, ref, ctx.bc_error) for key, label, ref in BC_LAUNCH_ROWS]
    else:
        rows += _barecuda_rows(ctx, bc, s, peers)
    if peers:
        from barecuda.bench import peers as peer_rows
        rows += lib_raw_rows(ctx)
        rows += peer_rows.launch_rows(ctx)
    return rows


LIB_RAW_ROWS = [("raw4pts", "raw C cuLaunchKernel, 4 pointer args, torch's stream", "torch"),
                ("raw4pcs", "raw C cuLaunchKernel, 4 pointer args, CuPy's stream", "cupy")]
DLX_ROWS = [("rawtorch4p", "raw C cuLaunchKernel + torch's DLPack C reads, 4 tensors"),
            ("torchread4", "torch's DLPack C reads alone, 4 tensors + stream")]
# The floors under torch4p: the row's own loop and call (K4P_STMT) on a C method that
# does nothing but the raw launch (floor4pts), or torch's reads and the raw launch
# (floortorch4p): what any Python-callable launch costs at the least, without and with
# honouring torch's stream rule (_baseline.LaunchFloor).
FLOOR_ROWS = [("floor4pts", "floor: the Python loop + a C call making the raw launch, torch's stream", False),
              ("floortorch4p", "floor: the Python loop + a C call making torch's C reads + the raw launch",
               True)]


def lib_raw_rows(ctx):
    """Raw C with the 4 pointers of the 4-pointer kernel on each library's own stream
    (the references of ``torch4p`` / ``cupy4p``), then dlx_rows."""
    from barecuda.bench import peers as peer_rows
    rows = []
    for key, label, lib in LIB_RAW_ROWS:
        try:
            stream = lib_args(ctx, lib)[1]
        except Exception as e:   # noqa: BLE001 -- a missing peer is an n/a row, with the reason
            rows.append(na_row(key, label, None, peer_rows.not_installed(e)))
            continue
        rows.append(c_row(ctx.B, key, label, ctx.raw_fn[K4P], 1, 1, ctx.raw_params[K4P],
                          lib_stream_handle(stream)))
    return rows + dlx_rows(ctx)


def dlx_rows(ctx):
    """The raw C form of the ``torch4p`` row (``_baseline.dlx_launch_batches``): a C loop
    that reads the 4 tensors' addresses and torch's current stream through torch's
    DLPack C exchange API, as any C caller honouring torch's stream rule must, then
    makes the raw ``cuLaunchKernel``; and the reads alone (no launch). Both on torch's
    own stream while it is torch's current stream, as the ``torch4p`` row; ratios to
    raw C with 4 pointers on that stream. n/a without torch (with CUDA) or the API."""
    from barecuda.bench import peers as peer_rows
    B = ctx.B
    try:
        args, ts, _sync, setup, teardown = lib_args(ctx, "torch")
    except Exception as e:   # noqa: BLE001 -- a missing peer is an n/a row, with the reason
        return [na_row(key, label, "raw4pts", peer_rows.not_installed(e))
                for key, label in DLX_ROWS + [(k, lab) for k, lab, _ in FLOOR_ROWS]]
    pb = B.ParamBlock([bytes(8)] * 4)
    h = lib_stream_handle(ts)
    fn = ctx.raw_fn[K4P]
    ctx.keep.append(pb)
    rows = []
    for (key, label), launch in zip(DLX_ROWS, (True, False)):
        r = Row(key, label, "raw4pts")
        r.stmt = ("C loop: 4 x dltensor_from_py_object_no_sync + current_work_stream"
                  + (" + cuLaunchKernel" if launch else ""))
        r.issue = (lambda nb, bs, launch=launch:
                   [t / bs for t in B.dlx_launch_batches(fn, 1, 1, pb, h, args, nb, bs, launch=launch)])
        r.run = lambda n, launch=launch: B.dlx_launch_batches(fn, 1, 1, pb, h, args, 1, n, launch=launch)
        r.sync = lambda: B.stream_sync(h)
        r.setup, r.teardown = setup, teardown
        rows.append(r)
    for key, label, reads in FLOOR_ROWS:
        fl = B.LaunchFloor(fn, 1, 1, B.ParamBlock([bytes(8)] * 4) if reads else ctx.raw_params[K4P], h,
                           args if reads else None)
        r = py_row(key, label, K4P_STMT, dict(zip("abcd", args), k=fl, s=ts), "s.synchronize()", ref="raw4pts")
        r.setup, r.teardown = setup, teardown
        rows.append(r)
    return rows


def _pair_ratio(rows, key, ref):
    """Median over rounds of row ``key``'s issue ns / row ``ref``'s (None if either is missing)."""
    by = {r.key: r for r in rows if not r.na}
    if key not in by or ref not in by:
        return None
    return round_ratio(by[key].samples["issue"], by[ref].samples["issue"])


def _barecuda_rows(ctx, bc, s, peers=True):
    rows = []
    k4 = ctx.kern[K4]
    rows.append(_bc_row("bc0", lambda: ("k.launch(1, 1, stream=s)", {"k": ctx.kern[K0], "s": s}, 1)))
    rows.append(_bc_row("bc4", lambda: (K4_STMT, k4_ns(ctx), 1)))
    rows += tensor_rows(ctx, peers)

    def bc16():
        a16 = ctx.k16_args()
        ns = {"k": ctx.kern[K16], "s": s}
        ns.update({f"a{i}": a for i, a in enumerate(a16) if not isinstance(a, (int, float))})
        lit = ", ".join(f"a{i}" if f"a{i}" in ns else repr(a) for i, a in enumerate(a16))
        return f"k.launch(1, 1, {lit}, stream=s)", ns, 1
    rows.append(_bc_row("bc16", bc16))
    rows.append(_bc_row("plan4", lambda: ("p()", {"p": k4.bind(1, 1, *ctx.k4_args(), stream=s), "s": s}, 1)))

    def plans():
        return [k4.bind(1, 1, *ctx.k4_args(), stream=s) for _ in range(BATCH)]

    def all4():
        if not hasattr(bc, "launch_all"):
            raise NotAvailable("barecuda.launch_all is missing")
        return "la(plans)", {"la": bc.launch_all, "plans": plans(), "s": s}, BATCH
    rows.append(_bc_row("all4", all4))
    rows.append(_bc_row("plist4", lambda: ("pl()", {"pl": bc.PlanList(plans()), "s": s}, BATCH)))

    def bcex4():
        if not hasattr(k4, "launch_config"):
            raise NotAvailable("Kernel.launch_config is missing")
        cfg = bc.LaunchConfig(1, 1, stream=s, priority=0)
        return "k.launch_config(cfg, o, i, 7, 1.5)", dict(k4_ns(ctx), cfg=cfg), 1
    rows.append(_bc_row("bcex4", bcex4))
    rows.append(_bc_row("bcexplan4", lambda: (
        "p()", {"p": k4.bind_config(bc.LaunchConfig(1, 1, stream=s, priority=0), *ctx.k4_args()), "s": s}, 1)))
    # GIL released vs held around the launch
    desc, setter, getter = gil_switch(bc)
    ctx.extra["gil_switch"] = desc
    for flag, key in ((True, "gilrel4"), (False, "gilheld4")):
        if setter is None:
            rows.append(na_row(key, _LABEL[key][0], "raw4", desc))
            continue
        r = _bc_row(key, lambda: (K4_STMT, k4_ns(ctx), 1))
        old = getter()
        r.setup = (lambda f=flag: setter(f))
        r.teardown = (lambda o=old: setter(o))
        rows.append(r)
    return rows


def launch_section(ctx):
    """The launch table: every row alternated over ``settings.rounds``."""
    st = ctx.settings
    say("barecuda.bench: setting up launch rows (peers: importing, compiling)...")
    rows = build_launch_rows(ctx, peers=st.peers)
    say(f"barecuda.bench: {len([r for r in rows if not r.na])} launch rows, {st.rounds} alternated rounds")
    run_rounds(rows, st.rounds, st.batches, st.thr_n, st.rt_n, ctx.B.ctx_sync)
    rat = ratios(rows)
    notes = ["refs: raw C row with the same arg count; peers vs raw C 4 args; LaunchConfig vs raw C Ex; "
             "torch/CuPy tensors vs raw C 4 pointers on that library's (non-blocking) stream"]
    torch_vs_dlx = _pair_ratio(rows, "torch4p", "rawtorch4p")
    if torch_vs_dlx is not None:
        notes.append(f"4 torch tensors vs raw C with torch's own C reads (rawtorch4p): {torch_vs_dlx:.3f}")
    ctx.extra["torch4p_vs_rawtorch4p"] = torch_vs_dlx
    for ref in ("floor4pts", "floortorch4p"):
        x = _pair_ratio(rows, "torch4p", ref)
        if x is not None:
            notes.append(f"4 torch tensors vs {ref} (the same call on a C method doing only the raw work): {x:.3f}")
        ctx.extra[f"torch4p_vs_{ref}"] = x
    sec = Section("launch", "launch (ns per launch)",
                  [("issue", 8), ("x", 6), ("thr", 9), ("x", 6), ("rt", 9), ("x", 6)],
                  notes=notes, data=[r.as_json(rat) for r in rows])
    for r in rows:
        if r.na:
            sec.add(r.label, f"n/a ({r.na})")
            continue
        res, x = r.result(), rat.get(r.key, {})
        sec.add(r.label + ("" if r.ref else " (ref)"),
                [fmt_ns(res["issue"]), fmt_x(x.get("issue")), fmt_ns(res["thr"]), fmt_x(x.get("thr")),
                 fmt_ns(res["rt"]), fmt_x(x.get("rt"))])
    return sec


# ------------------------------------------------------------------ threads
def thread_scaling(ctx):
    """Aggregate launches/s of 1 vs 4 threads, each on its own stream, batches of
    BATCH launches followed by a sync of that thread's stream (all timed).
    Returns ``{label: {"1": .., "4": .., "scaling": ..}}`` (or ``{"na": reason}``)."""
    B, st = ctx.B, ctx.settings
    nb = max(1, st.thread_launches // BATCH)
    results = {}
    variants = [("raw C cuLaunchKernel (GIL released in C loop)", "raw", None)]
    setter = getter = None
    if not ctx.bc_error:
        _, setter, getter = gil_switch(ctx.bc)
        for flag, word in ((False, "held"), (True, "released")) if setter else ((None, ""),):
            suffix = f", GIL {word}" if word else ""
            variants.append((f"barecuda kernel.launch{suffix}", "bc", flag))
            variants.append((f"barecuda plan(){suffix}", "plan", flag))
    streams_raw = [B.stream_create() for _ in range(4)]
    streams_bc = [ctx.bc.Stream() for _ in range(4)] if not ctx.bc_error else []

    def make_body(kind, i):
        if kind == "raw":
            return lambda: B.launch_batches(ctx.raw_fn[K4], 1, 1, ctx.raw_params[K4], streams_raw[i], nb, BATCH)
        s = streams_bc[i]
        if kind == "bc":
            loops = compile_loops(K4_STMT, k4_ns(ctx, s), "s.synchronize()")
        else:
            loops = compile_loops("p()", {"p": ctx.kern[K4].bind(1, 1, *ctx.k4_args(), stream=s), "s": s},
                                  "s.synchronize()")
        return lambda: loops["issue"](nb, BATCH)

    def run(kind, nthreads):
        errors = []
        barrier = threading.Barrier(nthreads + 1)

        def target(i):
            try:
                ctx.dev.set_current()
                B.use_device(0)
                body = make_body(kind, i)
                body()          # warm-up
                barrier.wait()
                body()
            except Exception as e:   # noqa: BLE001
                errors.append(why(e))
                barrier.abort()

        ts = [threading.Thread(target=target, args=(i,)) for i in range(nthreads)]
        for t in ts:
            t.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        t0 = now_ns()
        for t in ts:
            t.join()
        t1 = now_ns()
        if errors:
            raise RuntimeError(errors[0])
        return nthreads * nb * BATCH / ((t1 - t0) * 1e-9)

    try:
        for label, kind, flag in variants:
            one, four = [], []
            old = getter() if flag is not None else None
            try:
                if flag is not None:
                    setter(flag)
                for _ in range(st.thread_reps):
                    one.append(run(kind, 1))
                    four.append(run(kind, 4))
                results[label] = {"1": median(one), "4": median(four), "scaling": median(four) / median(one)}
            except Exception as e:   # noqa: BLE001
                results[label] = {"na": why(e)}
            finally:
                if flag is not None:
                    setter(old)
    finally:
        for s in streams_raw:
            try:
                B.stream_destroy(s)
            except Exception:   # noqa: BLE001
                pass
    return results


def threads_section(ctx):
    say("barecuda.bench: thread scaling...")
    res = thread_scaling(ctx)
    sec = Section("threads", "threads, 4-arg kernel, own streams (launches/s)",
                  [("1 thread", 10), ("4 threads", 10), ("x", 6)], data=res)
    for label, v in res.items():
        sec.add(label, f"n/a ({v['na']})" if "na" in v else [f"{v['1']:,.0f}", f"{v['4']:,.0f}", f"{v['scaling']:.2f}"])
    return sec


# ------------------------------------------------------------------ allocation check
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


def alloc_check(ctx, n):
    """Launch n times (chunks of 1000, then a sync); report the growth of
    sys.getallocatedblocks() and of tracemalloc's traced memory, and the traced peak
    during the loop, each minus the same figure for the same loop around ``pass``
    (so the harness's own objects cancel out: 0 means the launches allocated
    nothing that survived, and a peak of 0 that nothing was allocated in the loop)."""
    if ctx.bc_error:
        return {"na": ctx.bc_error}
    out = {}
    s = ctx.stream
    k4 = ctx.kern[K4]
    cases = [("kernel.launch, 4 args", K4_STMT, k4_ns(ctx), 1)]
    try:
        cases.append(("plan()", "p()", {"p": k4.bind(1, 1, *ctx.k4_args(), stream=s), "s": s}, 1))
        plans = [k4.bind(1, 1, *ctx.k4_args(), stream=s) for _ in range(BATCH)]
        cases.append((f"PlanList({BATCH})()", "pl()", {"pl": ctx.bc.PlanList(plans), "s": s}, BATCH))
    except Exception:   # noqa: BLE001 -- rows that cannot be built are n/a in the launch table
        pass
    chunk = 1000
    reps = max(1, n // chunk)
    for label, stmt, ns, per in cases:
        loops = compile_loops(stmt, ns, "s.synchronize()")
        control = compile_loops("pass", ns, "s.synchronize()")   # same harness, same names
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
            out[label] = {"na": why(e)}
    return out


def alloccheck_section(ctx):
    n = ctx.settings.alloc_check_n
    say(f"barecuda.bench: allocation check ({n:,} launches)...")
    res = alloc_check(ctx, n)
    sec = Section("alloc_check", "allocation check (vs the same loop around pass)",
                  [("launches", 9), ("blocks+", 8), ("traced+", 8), ("peak+", 8), ("grows with n", 13)],
                  notes=["a constant few bytes that do not grow with n is an object CPython keeps on a free list "
                         "(e.g. a call's *args tuple)"], data=res)
    if "na" in res:
        sec.add("", f"n/a ({res['na']})")
        return sec
    for label, v in res.items():
        if "na" in v:
            sec.add(label, f"n/a ({v['na']})")
        else:
            sec.add(label, [f"{v['launches']:,}", str(v["blocks_growth"]), f"{v['traced_growth_bytes']}B",
                            f"{v['traced_peak_in_loop_bytes']}B", "YES" if v["grows_with_count"] else "no"])
    return sec


SECTIONS = {"launch": launch_section, "threads": threads_section, "alloccheck": alloccheck_section}


def quick_launch_overhead(ctx, rounds=9):
    """(barecuda kernel.launch ns, raw C ns, ratio) per launch of the 4-argument
    kernel: medians of ``rounds`` alternated rounds of 3 batches (under a second)."""
    if ctx.bc_error:
        raise NotAvailable(ctx.bc_error)
    rows = [c_row(ctx.B, "raw4", "raw", ctx.raw_fn[K4], 1, 1, ctx.raw_params[K4], ctx.raw_stream),
            py_row("bc4", "bc", K4_STMT, k4_ns(ctx), "s.synchronize()", ref="raw4")]
    for r in rows:
        r.thr = r.rt = None
    run_rounds(rows, rounds, 3, 0, 0, ctx.B.ctx_sync, label=None)
    for r in rows:
        if r.na:
            raise NotAvailable(r.na)
    return rows[1].result()["issue"], rows[0].result()["issue"], ratios(rows)["bc4"]["issue"]
