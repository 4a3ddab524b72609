"""barecuda's own overhead on the graph hot paths, measured against the driver double.

    PYTHONPATH=src python3 bench/probes/graph_overhead.py [--reps N] [--repeat R]

The driver double (tests/fakecuda) makes every driver call nearly free, so a barecuda
call timed against it is (almost) barecuda's own overhead. Each row is timed beside the
same loop driven from C (bench/_graphbench's RawChain, no barecuda objects in the loop)
in the same process; the figure to read is the difference, ``bc - raw``, in ns per
operation: the overhead barecuda adds to the driver call. These are NOT GPU figures
(the lead measures those with ``python -m barecuda.bench --rows graph`` on a GPU).

Rows:
  capture     ``with s.capture(): 100 k.launch`` vs begin + 100 cuLaunchKernel + end
              (both destroy the graph); also per captured launch
  eager       100 eager ``k.launch`` vs 100 cuLaunchKernel (what a launch costs outside
              a capture: capture's per-launch extra is capture - eager)
  update      ``exe.update(g)`` of a 100-node graph vs cuGraphExecUpdate
  launch      ``exe.launch(s)`` of a 1-node graph vs cuGraphLaunch (the double replays
              every node of a launched graph, so a long chain would hide the overhead)
  set_arg     ``h.set_arg(3, int)`` vs cuGraphExecKernelNodeSetParams, and with a
              DeviceBuffer: the same buffer re-set, and two buffers alternating
  ArgUpdate   ``upd.set(...)`` of 3 slots on 3 nodes (per argument, vs one
              cuGraphExecKernelNodeSetParams), and of 3 slots on one node (per call: one
              push for the three)
  floor       the same Python loops calling a C method of the same shape that does
              nothing (RawChain.noop): no Python-level row can cost less than raw + this
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))   # bench/probes/ -> the repository


def _use_double():
    """Point barecuda at the driver double (built by tests/conftest.py when out of date)."""
    if os.environ.get("BARECUDA_LIBCUDA"):
        return
    sys.path.insert(0, os.path.join(REPO, "tests"))
    import conftest     # builds tests/fakecuda/build/libfakecuda.so when needed
    if conftest._BUILD_ERROR:
        raise SystemExit(f"could not build the driver double:\n{conftest._BUILD_ERROR}")
    os.environ["BARECUDA_LIBCUDA"] = conftest.FAKE_LIB


def _timer(now):
    """Decorator: loop(n) becomes a sample, n -> the ns it took on the run's clock. The
    timing wraps the whole loop (one extra call per sample, none per iteration), so each
    iteration costs exactly what its hand-written loop does."""
    def timed(loop):
        def sample(n):
            t0 = now()
            loop(n)
            return now() - t0
        return sample
    return timed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="set_arg/launch calls per sample")
    ap.add_argument("--repeat", type=int, default=101, help="samples per row (the best is shown)")
    ap.add_argument("--rows", default="", help="comma-separated words: run only rows whose name has one")
    opts = ap.parse_args(argv)
    _use_double()
    import barecuda as bc
    from barecuda.bench import _graphbench as GB
    from barecuda.bench.graph_rows import VADD_PTX
    now = GB.now_ns
    timed = _timer(now)
    N = 100
    reps = opts.reps

    bc.Device(0).set_current()
    s = bc.Stream(non_blocking=True)
    k = bc.Module.from_ptx(VADD_PTX).get_kernel("gvadd")
    o, a, b = (bc.zeros(32, "float32", stream=s) for _ in range(3))
    b2 = bc.zeros(32, "float32", stream=s)
    s.synchronize()
    sh = s.handle_int
    raw = GB.RawChain(k.handle_int, o.ptr, a.ptr, b.ptr, 32, N)
    raw1 = GB.RawChain(k.handle_int, o.ptr, a.ptr, b.ptr, 32, 1)

    g = bc.Graph()
    prev = None
    nodes = []
    for _ in range(N):
        prev = g.add_kernel(k, 1, 32, o, a, b, 32, depends_on=prev)
        nodes.append(prev)
    exe = g.instantiate()
    exe.launch(s)               # launched: update and set_arg take their launched paths
    s.synchronize()
    h = exe.kernel_node(nodes[0])
    upd3 = exe.prepare_args([(nodes[i], 3) for i in range(3)])
    upd1 = exe.prepare_args([(nodes[0], 3), (nodes[0], 2), (nodes[0], 1)])
    g1 = bc.Graph()
    g1.add_kernel(k, 1, 32, o, a, b, 32)
    exe1 = g1.instantiate()

    @timed
    def bc_capture(n):
        for _ in range(n):
            with s.capture():
                for _ in range(N):
                    k.launch(1, 32, o, a, b, 32, stream=s)

    @timed
    def bc_eager(n):
        for _ in range(n):
            for _ in range(N):
                k.launch(1, 32, o, a, b, 32, stream=s)

    @timed
    def bc_update(n):
        for _ in range(n):
            exe.update(g)

    @timed
    def bc_launch(n):
        for _ in range(n):
            exe1.launch(s)

    @timed
    def bc_set_int(n):
        for i in range(n):
            h.set_arg(3, i & 31)

    @timed
    def bc_set_same_buf(n):
        for _ in range(n):
            h.set_arg(2, b)

    def bc_set_two_bufs(n):
        bufs = (b, b2) * (n // 2)
        t0 = now()
        for x in bufs:
            h.set_arg(2, x)
        return now() - t0

    def bc_batch3(n):
        t0 = now()
        for i in range(n // 3):
            upd3.set(i & 31, (i + 1) & 31, (i + 2) & 31)
        return (now() - t0) * n / (3 * (n // 3))

    @timed
    def bc_batch1(n):
        for i in range(n):
            upd1.set(i & 31, b, a)

    @timed
    def floor_set_arg(n):
        for i in range(n):
            raw.noop(3, i & 31)

    @timed
    def floor_launch(n):
        for _ in range(n):
            raw.noop(s)

    def zero(n):
        return 0

    cap_n, upd_n = max(reps // 2000, 2), max(reps // 100, 10)
    rows = [
        # name, bc(n), raw(n), n per sample
        ("capture of 100 launches", bc_capture, lambda n: raw.capture(sh, N, n), cap_n),
        ("  eager 100 k.launch (no capture)", bc_eager, lambda n: raw.eager_loop(sh, n), cap_n),
        ("exe.update, 100 nodes", bc_update, lambda n: raw.update(n), upd_n),
        ("exe.launch issue, 1 node", bc_launch, lambda n: raw1.issue(sh, n), reps),
        ("set_arg(3, int)", bc_set_int, lambda n: raw.setparams(n), reps),
        ("set_arg(2, same buffer)", bc_set_same_buf, lambda n: raw.setparams(n), reps),
        ("set_arg(2, two buffers alternating)", bc_set_two_bufs, lambda n: raw.setparams(n), reps),
        ("ArgUpdate.set 3 nodes x 1 arg, per arg", bc_batch3,
         lambda n: raw.setparams_each(3, n // 3) * n / (3 * (n // 3)), reps),
        ("ArgUpdate.set 1 node x 3 args, per call", bc_batch1, lambda n: raw.setparams(n), reps),
        ("floor: loop + no-op C call (noop(3, i&31))", floor_set_arg, zero, reps),
        ("floor: loop + no-op C call (noop(s))", floor_launch, zero, reps),
    ]
    print("barecuda overhead on the DRIVER DOUBLE (tests/fakecuda), ns per operation; not GPU figures")
    print(f"(best of {opts.repeat} alternated samples each; the overhead is barecuda - raw C)")
    print(f"{'row':40s} {'barecuda':>10s} {'raw C':>10s} {'overhead':>10s}")
    want = [w for w in opts.rows.split(",") if w]
    for name, fb, fr, n in rows:
        if want and not any(w in name for w in want):
            continue
        if name.startswith("floor") and not hasattr(raw, "noop"):
            continue                # a build from before RawChain.noop
        fb(max(n // 10, 1))
        fr(max(n // 10, 1))
        s.synchronize()
        bs, rs = [], []
        for _ in range(opts.repeat):
            bs.append(fb(n) / n)
            s.synchronize()         # the double keeps queued work until a sync: keep each sample alike
            rs.append(fr(n) / n)
            s.synchronize()
        # The minimum: the sample least disturbed by other processes (a shared machine).
        mb, mr = min(bs), min(rs)
        print(f"{name:40s} {mb:10.1f} {mr:10.1f} {mb - mr:10.1f}")
        sys.stdout.flush()
    s.synchronize()


if __name__ == "__main__":
    main()
