"""Benchmark rows for several GPUs: NCCL all-reduce through barecuda, IPC open cost,
peer-copy bandwidth.

Sections (``python -m barecuda.bench --rows dist``, or each by name): ``allreduce``
(one process, every GPU, ``Communicator.for_devices``), ``ipc``, ``peercopy``. Rows are
dicts ``{"key", "label", "value", "unit", "note"}``; ``run()`` gives them all without the
bench harness. ``bench/nccl_compare.py`` measures barecuda's all-reduce beside
torch.distributed's in the same two-process job, with :func:`time_allreduce`.

Method
------
* All-reduce: float32 buffers, in place, on one barecuda stream per rank. After
  ``warmup`` calls, ``iters`` calls are timed between two CUDA events on that stream;
  the per-call time is the median over ``rounds`` such batches. Bandwidth follows
  nccl-tests: ``algbw = bytes / time``, ``busbw = algbw * 2 (n - 1) / n``; with one
  GPU the bandwidth rows read "n/a (needs 2 GPUs)" (one rank moves no data).
* Latency: the same at 8 bytes (two float32), in microseconds.
* IPC open cost: a child process exports a buffer from ``IpcAllocator``; this process
  opens and closes it ``n`` times; median of open+close (``cuIpcOpenMemHandle`` +
  ``cuIpcCloseMemHandle`` and barecuda's checks), in microseconds.
* Tensors on the fast path: ``kernel.launch`` of a 4-pointer kernel with 4 torch tensors
  (4 CuPy arrays, 4 DeviceBuffers) against raw C with the same 4 pointers, ns per
  launch and the ratio (the launch rows of launch_rows.tensor_rows, alternated).
* Peer copy: 256 MiB device 0 -> device 1 on a stream of device 1: barecuda's
  ``DeviceBuffer.copy_from`` (a Python call per copy) against
  ``barecuda._topology.peer_copy_loop`` (``cuMemcpyPeerAsync`` in a C loop), GB/s.
"""
import multiprocessing as mp
import os
import statistics

from barecuda.bench.harness import now_ns

ORDER = 60
MiB = 1 << 20
SIZES = (1 * MiB, 16 * MiB, 256 * MiB, 1024 * MiB)


def _row(key, label, value, unit, note=""):
    return {"key": key, "label": label, "value": value, "unit": unit, "note": note}


def busbw(nbytes, seconds, nranks):
    """nccl-tests' bus bandwidth of an all-reduce, GB/s; None for fewer than 2 ranks
    (one rank moves nothing over a bus: the figure would be meaningless)."""
    if nranks < 2:
        return None
    algbw = nbytes / seconds / 1e9
    return algbw * 2 * (nranks - 1) / nranks


def time_allreduce(comms, bufs, streams, iters, warmup=5, rounds=5):
    """Median seconds per all-reduce over ``rounds`` batches of ``iters`` calls.
    ``comms``/``bufs``/``streams``: one per local rank (one element in the
    multi-process form, several in the one-process form, issued inside a group)."""
    import barecuda as bc
    from barecuda import nccl

    def issue(n):
        for _ in range(n):
            if len(comms) == 1:
                comms[0].all_reduce(bufs[0], stream=streams[0])
            else:
                with nccl.group():
                    for c, b, s in zip(comms, bufs, streams):
                        c.all_reduce(b, stream=s)

    issue(warmup)
    for s in streams:
        s.synchronize()
    times = []
    for _ in range(rounds):
        start, end = bc.Event(streams[0].device), bc.Event(streams[0].device)
        start.record(streams[0])
        issue(iters)
        end.record(streams[0])
        for s in streams:
            s.synchronize()
        times.append(end.elapsed_ms(start) / 1e3 / iters)
    return statistics.median(times)


def iters_for(nbytes):
    return max(5, min(200, (2 * 1024 * MiB) // max(nbytes, 1)))


def allreduce_rows(sizes=SIZES, rounds=5):
    import barecuda as bc
    from barecuda import nccl
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    comms = nccl.Communicator.for_devices()
    n = len(comms)
    streams = [bc.Stream(c.device) for c in comms]
    rows = []
    try:
        for size in sizes:
            if n < 2:
                rows.append(_row(f"allreduce_{size // MiB}MiB",
                                 f"barecuda NCCL all-reduce {size // MiB} MiB, {n} GPU(s)", None, "GB/s busbw",
                                 "needs 2 GPUs"))
                continue
            bufs = [bc.alloc(size, device=c.device).view("float32") for c in comms]
            t = time_allreduce(comms, bufs, streams, iters_for(size), rounds=rounds)
            rows.append(_row(f"allreduce_{size // MiB}MiB", f"barecuda NCCL all-reduce {size // MiB} MiB, {n} GPU(s)",
                             busbw(size, t, n), "GB/s busbw", f"{t * 1e6:.1f} us/op, one process"))
            for b in bufs:
                b.close()
        small = [bc.alloc(8, device=c.device).view("float32") for c in comms]
        t = time_allreduce(comms, small, streams, 200, rounds=rounds)
        rows.append(_row("allreduce_8B", f"barecuda NCCL all-reduce 8 bytes, {n} GPU(s)", t * 1e6, "us",
                         "latency, one process"))
    finally:
        for c in comms:
            c.close()
    return rows


def _exporter(q, done):
    import barecuda as bc
    from barecuda import ipc
    buf = bc.ipc.IpcAllocator(0).alloc(64 * MiB)
    q.put(ipc.export_buffer(buf))
    done.wait(300)


def ipc_open_row(n=200):
    from barecuda import ipc
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=_exporter, args=(q, done))
    p.start()
    try:
        h = q.get(timeout=120)
        ipc.open_buffer(h).close()                  # first open pays one-time costs
        ts = []
        for _ in range(n):
            t0 = now_ns()
            ipc.open_buffer(h).close()
            ts.append(now_ns() - t0)
    finally:
        done.set()
        p.join(60)
    return _row("ipc_open", "IPC open + close of a 64 MiB buffer", statistics.median(ts) / 1e3, "us",
                f"median of {n}")


def peer_copy_rows(nbytes=256 * MiB, iters=10, rounds=5):
    import barecuda as bc
    from barecuda._topology import peer_copy_loop
    if bc.device_count() < 2:
        return [_row("peer_copy", "peer copy", None, "GB/s", "needs 2 GPUs")]
    bc.Device(0).enable_peer_access(1)
    bc.Device(1).enable_peer_access(0)
    src = bc.alloc(nbytes, device=0)
    dst = bc.alloc(nbytes, device=1)
    s = bc.Stream(1)

    def timed(fn):
        out = []
        fn()
        s.synchronize()
        for _ in range(rounds):
            a, b = bc.Event(1), bc.Event(1)
            a.record(s)
            fn()
            b.record(s)
            s.synchronize()
            out.append(nbytes * iters / (b.elapsed_ms(a) / 1e3) / 1e9)
        return statistics.median(out)

    def bc_loop():
        for _ in range(iters):
            dst.copy_from(src, stream=s)

    raw = timed(lambda: peer_copy_loop(dst, src, nbytes, iters, stream=s))
    ours = timed(bc_loop)
    return [_row("peer_copy_raw", f"raw C cuMemcpyPeerAsync {nbytes // MiB} MiB, GPU0 -> GPU1", raw, "GB/s"),
            _row("peer_copy_bc", f"barecuda copy_from {nbytes // MiB} MiB, GPU0 -> GPU1", ours, "GB/s",
                 f"{ours / raw:.3f}x raw C")]


def tensor_launch_rows(rounds=15):
    """The tensors-on-the-fast-path launch rows (launch_rows.tensor_rows: 4 DeviceBuffers,
    4 torch tensors, 4 CuPy arrays) beside raw C with the same 4 pointers (on the same
    stream: launch_rows.lib_raw_rows, with torch's own C reads as a row), alternated
    over ``rounds``; values are ns per launch, notes the ratio to raw C (issue 12's
    target: torch <= 1.15x). For bench/nccl_compare.py, which runs them in the same job
    as torch.distributed."""
    from barecuda.bench.context import Context, K4P
    from barecuda.bench.harness import c_row, ratios, run_rounds
    from barecuda.bench.launch_rows import lib_raw_rows, tensor_rows
    ctx = Context()
    try:
        rows = [c_row(ctx.B, "raw4p", "raw C cuLaunchKernel, 4 pointer args", ctx.raw_fn[K4P], 1, 1,
                      ctx.raw_params[K4P], ctx.raw_stream)] + tensor_rows(ctx) + lib_raw_rows(ctx)
        run_rounds(rows, rounds, 10, 0, 0, ctx.B.ctx_sync, label=None)
        rat = ratios(rows)
        out = []
        for r in rows:
            if r.na:
                out.append(_row(r.key, r.label, None, "ns/launch", f"n/a: {r.na}"))
                continue
            x = (rat.get(r.key) or {}).get("issue")
            out.append(_row(r.key, r.label, r.result()["issue"], "ns/launch",
                            f"{x:.3f}x raw C" if x else "reference"))
        return out
    finally:
        ctx.close()


def run(quick=False):
    """Every row this machine allows (skipped rows carry the reason in ``note``)."""
    rows = []
    rounds = 3 if quick else 5
    for name, fn in (("allreduce", lambda: allreduce_rows(rounds=rounds)),
                     ("tensors", lambda: tensor_launch_rows(6 if quick else 15)),
                     ("ipc", lambda: [ipc_open_row(50 if quick else 200)]),
                     ("peer", lambda: peer_copy_rows(rounds=rounds))):
        try:
            rows.extend(fn())
        except Exception as e:  # noqa: BLE001 - the reason is the row
            rows.append(_row(name, name, None, "", f"n/a: {type(e).__name__}: {e}"))
    return rows


def _section(key, title, fn):
    from barecuda.bench.report import Section
    rows = fn()
    sec = Section(key, title, [("value", 10), ("unit", 11)], data=rows)
    for r in rows:
        if r["value"] is None:
            sec.add(r["label"], f"n/a ({r['note']})")
        else:
            sec.add(r["label"], [f"{r['value']:.2f}", r["unit"]])
            if r["note"]:
                sec.notes.append(f"{r['label']}: {r['note']}")
    return sec


def allreduce_section(ctx):
    rounds = getattr(getattr(ctx, "settings", None), "rounds", 5) or 5
    return _section("allreduce", "NCCL all-reduce via barecuda", lambda: allreduce_rows(rounds=min(rounds, 7)))


def ipc_section(ctx):
    return _section("ipc", "CUDA IPC", lambda: [ipc_open_row()])


def peercopy_section(ctx):
    return _section("peercopy", "peer copies", lambda: peer_copy_rows())


SECTIONS = {"allreduce": allreduce_section, "ipc": ipc_section, "peercopy": peercopy_section}
ALIASES = {"dist": ("allreduce", "ipc", "peercopy")}


def format_rows(rows):
    out = []
    for r in rows:
        v = "n/a" if r["value"] is None else f"{r['value']:10.2f}"
        out.append(f"{r['label']:<55} {v:>10} {r['unit']:<11} {r['note']}")
    return "\n".join(out)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    print(format_rows(run(a.quick)))


if __name__ == "__main__":
    main()
