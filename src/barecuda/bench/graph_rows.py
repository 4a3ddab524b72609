"""CUDA graph rows: replay, launch issue, kernel-node set_arg, whole-graph update,
capture of 100 launches, instantiate, and the inference-loop step; each beside a raw
C row of the same run (src/barecuda/bench/_graphbench.pyx) and the peers where installed
(PyTorch ``torch.cuda.CUDAGraph``, CuPy stream capture).

Section (``--rows`` name): ``graph``. Every figure is the median over alternated
rounds; ratios are taken round by round against the raw C row of the same round.

The inference-loop step is a chain of 100 kernel nodes (``vadd(out, a, b, n)`` on 32
threads) in which 3 arguments change every step, run as: eager ``kernel.launch``
(100 per step), ``PlanList`` (plans re-bound for the 3 changed launches), barecuda
graph + 3 ``ExecKernelNode.set_arg``, raw C graph + 3
``cuGraphExecKernelNodeSetParams``, barecuda graph + one ``ArgUpdate.set`` of the 3
arguments (one call, one push per node), raw C eager launches, PyTorch eager (100 small
in-place adds), and a PyTorch CUDA graph re-captured every step.

The ``set_arg`` group also has the batched form (``GraphExec.prepare_args``): per
argument, 3 arguments of 3 nodes in one ``ArgUpdate.set`` (one push per node: compare
with the raw C per-node row) and 3 arguments of one node (one push for the three).

The launch-issue and ``set_arg`` groups carry a ``floor`` row: the same Python loop
calling a C method of the same shape that does nothing (``RawChain.noop``, no driver
call). A Python-level row cannot cost less than its raw C row plus that floor, so
``x`` of the barecuda row minus ``x`` of the floor row is what barecuda itself adds
beyond the call. The ``set_arg`` group also has the floor with the driver call in it
(``RawChain.set_one``: the same loop calling a C method that stores the value and makes
the raw ``cuGraphExecKernelNodeSetParams``, no check): the least any Python-callable
``set_arg`` can cost; ``node.set_arg`` divided by it is barecuda's own share.
"""
from barecuda import _ptx_samples
from barecuda.bench.harness import median as _median, round_ratio
from barecuda.bench._kernel_timing import torch_graph

ORDER = 30
NODES = 100
VADD_PTX = _ptx_samples.GRAPH_VADD


class _Row:
    def __init__(self, key, label, ref, fn):
        self.key, self.label, self.ref, self.fn = key, label, ref, fn
        self.samples, self.na = [], None


def _rounds(rows, rounds, say=None):
    live = [r for r in rows if r.na is None]
    for r in live:                       # warm-up; a row that cannot run is n/a
        try:
            r.fn()
        except Exception as e:   # noqa: BLE001 -- reported in the table
            r.na = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:100]
    for _ in range(rounds):
        for r in rows:
            if r.na is None:
                try:
                    r.samples.append(r.fn())
                except Exception as e:   # noqa: BLE001
                    r.na = f"{type(e).__name__}: {e}"[:100]
    by_key = {r.key: r for r in rows}
    ratio = {}
    for r in rows:
        ref = by_key.get(r.ref)
        if r.na or ref is None or ref.na or not ref.samples:
            ratio[r.key] = None
            continue
        ratio[r.key] = round_ratio(r.samples, ref.samples)
    return ratio


def build_rows(bc, now_ns, reps=200):
    """Every row of the section: [(group, [_Row, ...])]. ``now_ns``: the run's clock."""
    from barecuda.bench import _graphbench as GB
    dev = bc.Device(0)
    dev.set_current()
    s = bc.Stream(non_blocking=True)
    k = bc.Module.from_ptx(VADD_PTX).get_kernel("gvadd")
    o, a, b = (bc.zeros(32, "float32", stream=s) for _ in range(3))
    s.synchronize()
    raw = GB.RawChain(k.handle_int, o.ptr, a.ptr, b.ptr, 32, NODES)
    sh = s.handle_int

    g = bc.Graph()
    prev, nodes = None, []
    for _ in range(NODES):
        prev = g.add_kernel(k, 1, 32, o, a, b, 32, depends_on=prev)
        nodes.append(prev)
    exe = g.instantiate(upload=s)
    hs = [exe.kernel_node(nodes[i]) for i in range(3)]
    h0 = hs[0]
    upd3 = exe.prepare_args([(nodes[i], 3) for i in range(3)])      # 3 nodes, one slot each
    upd1 = exe.prepare_args([(nodes[0], 3), (nodes[0], 2), (nodes[0], 1)])   # 3 slots of one node

    def per(total, n):
        return total / n

    def bc_replay():
        t0 = now_ns()
        for _ in range(reps):
            exe.launch(s)
        s.synchronize()
        return (now_ns() - t0) / (reps * NODES)

    def bc_issue():
        t0 = now_ns()
        for _ in range(reps):
            exe.launch(s)
        t = now_ns() - t0
        s.synchronize()
        return t / reps

    def bc_set_arg():
        t0 = now_ns()
        for i in range(reps * 10):
            h0.set_arg(3, i & 31)
        return (now_ns() - t0) / (reps * 10)

    def bc_batch3():
        t0 = now_ns()
        for i in range(reps * 4):
            upd3.set(i & 31, (i + 1) & 31, (i + 2) & 31)
        return (now_ns() - t0) / (reps * 4 * 3)

    def bc_batch1():
        t0 = now_ns()
        for i in range(reps * 4):
            upd1.set(i & 31, b, a)
        return (now_ns() - t0) / (reps * 4 * 3)

    # The floor under the two Python-level rows above: the same loop calling a C method of
    # the same shape that does nothing (RawChain.noop), no driver call.
    def floor_set_arg():
        t0 = now_ns()
        for i in range(reps * 10):
            raw.noop(3, i & 31)
        return (now_ns() - t0) / (reps * 10)

    # The same loop calling a C method that makes the raw call itself (RawChain.set_one: the
    # store and one cuGraphExecKernelNodeSetParams, no check): the least any Python-callable
    # set_arg can cost. bc_setarg / this row is what barecuda adds to it.
    def floor_set_one():
        t0 = now_ns()
        for i in range(reps * 10):
            raw.set_one(3, i & 31)
        return (now_ns() - t0) / (reps * 10)

    def floor_issue():
        t0 = now_ns()
        for _ in range(reps):
            raw.noop(s)
        return (now_ns() - t0) / reps

    def bc_update():
        t0 = now_ns()
        for _ in range(reps):
            exe.update(g)
        return (now_ns() - t0) / reps

    def bc_capture():
        t0 = now_ns()
        for _ in range(10):
            with s.capture():
                for _ in range(NODES):
                    k.launch(1, 32, o, a, b, 32, stream=s)
        return (now_ns() - t0) / 10

    def bc_instantiate():
        t0 = now_ns()
        for _ in range(10):
            g.instantiate().close()
        return (now_ns() - t0) / 10

    steps = 50
    plans = [k.bind(1, 32, o, a, b, 32, stream=s) for _ in range(NODES)]
    plist = bc.PlanList(plans)

    def loop_eager():
        t0 = now_ns()
        for st in range(steps):
            k.launch(1, 32, o, a, b, st & 31, stream=s)
            k.launch(1, 32, o, a, b, (st + 1) & 31, stream=s)
            k.launch(1, 32, o, a, b, (st + 2) & 31, stream=s)
            for _ in range(NODES - 3):
                k.launch(1, 32, o, a, b, 32, stream=s)
        s.synchronize()
        return (now_ns() - t0) / steps

    def loop_graph_batch():
        t0 = now_ns()
        for st in range(steps):
            upd3.set(st & 31, (st + 1) & 31, (st + 2) & 31)
            exe.launch(s)
        s.synchronize()
        return (now_ns() - t0) / steps

    def loop_planlist():
        t0 = now_ns()
        for st in range(steps):
            plans[0].set_arg(3, st & 31)
            plans[1].set_arg(3, (st + 1) & 31)
            plans[2].set_arg(3, (st + 2) & 31)
            plist()
        s.synchronize()
        return (now_ns() - t0) / steps

    def loop_graph():
        a0, a1, a2 = hs
        t0 = now_ns()
        for st in range(steps):
            a0.set_arg(3, st & 31)
            a1.set_arg(3, (st + 1) & 31)
            a2.set_arg(3, (st + 2) & 31)
            exe.launch(s)
        s.synchronize()
        return (now_ns() - t0) / steps

    groups = [
        ("replay per node (ns)", [
            _Row("raw_replay", "raw C cuGraphLaunch, per node", None, lambda: raw.replay(sh, reps) / (reps * NODES)),
            _Row("bc_replay", "barecuda exe.launch, per node", "raw_replay", bc_replay)]),
        ("launch issue (ns)", [
            _Row("raw_issue", "raw C cuGraphLaunch issue", None, lambda: raw.issue(sh, reps) / reps),
            _Row("bc_issue", "barecuda exe.launch issue", "raw_issue", bc_issue),
            _Row("floor_issue", "floor: the Python loop + a no-op C call", "raw_issue", floor_issue)]),
        ("kernel-node set_arg (ns)", [
            _Row("raw_setp", "raw C cuGraphExecKernelNodeSetParams", None, lambda: raw.setparams(reps * 10) / (reps * 10)),
            _Row("bc_setarg", "barecuda node.set_arg", "raw_setp", bc_set_arg),
            _Row("floor_setarg", "floor: the Python loop + a no-op C call", "raw_setp", floor_set_arg),
            _Row("floor_setone", "floor: the Python loop + a C call making the raw call", "raw_setp", floor_set_one),
            _Row("raw_setp3", "raw C cuGraphExecKernelNodeSetParams, 3 nodes in turn", None,
                 lambda: raw.setparams_each(3, reps * 4) / (reps * 4 * 3)),
            _Row("bc_batch3", "barecuda ArgUpdate.set, 3 nodes x 1 arg, per arg", "raw_setp3", bc_batch3),
            _Row("bc_batch1", "barecuda ArgUpdate.set, 1 node x 3 args, per arg", "raw_setp", bc_batch1)]),
        ("whole-graph update, 100 nodes (ns)", [
            _Row("raw_update", "raw C cuGraphExecUpdate", None, lambda: raw.update(reps) / reps),
            _Row("bc_update", "barecuda exe.update", "raw_update", bc_update)]),
        ("capture of 100 launches (ns)", [
            _Row("raw_capture", "raw C begin + 100 cuLaunchKernel + end", None,
                 lambda: raw.capture(sh, NODES, 10) / 10),
            _Row("bc_capture", "barecuda with s.capture(): 100 k.launch", "raw_capture", bc_capture)]),
        ("instantiate, 100 nodes (ns)", [
            _Row("raw_inst", "raw C cuGraphInstantiateWithFlags + destroy", None, lambda: raw.instantiate(10) / 10),
            _Row("bc_inst", "barecuda g.instantiate() + close", "raw_inst", bc_instantiate)]),
        ("inference-loop step: 100 kernels, 3 args change (ns/step)", [
            _Row("raw_loop", "raw C graph + 3 cuGraphExecKernelNodeSetParams", None,
                 lambda: raw.loop(sh, steps) / steps),
            _Row("raw_eager", "raw C eager cuLaunchKernel x100", "raw_loop", lambda: raw.eager_loop(sh, steps) / steps),
            _Row("bc_loop_graph", "barecuda graph + 3 set_arg + launch", "raw_loop", loop_graph),
            _Row("bc_loop_batch", "barecuda graph + ArgUpdate.set(3 args) + launch", "raw_loop", loop_graph_batch),
            _Row("bc_loop_plist", "barecuda PlanList + 3 plan.set_arg", "raw_loop", loop_planlist),
            _Row("bc_loop_eager", "barecuda eager kernel.launch x100", "raw_loop", loop_eager)]),
    ]
    groups[-1][1].extend(_torch_rows(steps, reps, now_ns, groups))
    groups[-1][1].extend(_cupy_rows(reps, now_ns, groups))
    keep = (raw, g, exe, hs, upd3, upd1, plans, plist, o, a, b, s, k)
    return groups, keep


def _torch_rows(steps, reps, now_ns, groups):
    """PyTorch CUDAGraph replay/issue/capture rows (appended to their groups) and the
    loop rows (returned)."""
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch has no CUDA device")
    except Exception as e:   # noqa: BLE001
        r = _Row("torch_loop", "PyTorch CUDA graph re-captured per step", "raw_loop", None)
        r.na = f"torch: {type(e).__name__}"
        return [r]
    x = torch.zeros(32, device="cuda")
    y = torch.ones(32, device="cuda")

    def body():
        for _ in range(NODES):
            x.add_(y)

    tg = torch_graph(torch, body)

    def t_replay():
        t0 = now_ns()
        for _ in range(reps):
            tg.replay()
        torch.cuda.synchronize()
        return (now_ns() - t0) / (reps * NODES)

    def t_issue():
        t0 = now_ns()
        for _ in range(reps):
            tg.replay()
        t = now_ns() - t0
        torch.cuda.synchronize()
        return t / reps

    def t_capture():
        t0 = now_ns()
        for _ in range(5):
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2):
                body()
        return (now_ns() - t0) / 5

    def t_eager():
        t0 = now_ns()
        for _ in range(steps):
            body()
        torch.cuda.synchronize()
        return (now_ns() - t0) / steps

    def t_recapture():
        t0 = now_ns()
        for _ in range(5):
            g2 = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g2):
                body()
            g2.replay()
        torch.cuda.synchronize()
        return (now_ns() - t0) / 5

    groups[0][1].append(_Row("torch_replay", "PyTorch CUDAGraph.replay, per node", "raw_replay", t_replay))
    groups[1][1].append(_Row("torch_issue", "PyTorch CUDAGraph.replay issue", "raw_issue", t_issue))
    groups[4][1].append(_Row("torch_capture", "PyTorch torch.cuda.graph capture of 100 add_", "raw_capture",
                             t_capture))
    return [_Row("torch_eager", "PyTorch eager, 100 x.add_(y)", "raw_loop", t_eager),
            _Row("torch_loop", "PyTorch CUDA graph re-captured per step", "raw_loop", t_recapture)]


def _cupy_rows(reps, now_ns, groups):
    """CuPy stream-capture rows (replay, issue), appended to their groups."""
    try:
        import cupy as cp
        s = cp.cuda.Stream(non_blocking=True)
        x = cp.zeros(32, cp.float32)
        y = cp.ones(32, cp.float32)
        with s:
            s.begin_capture()
            for _ in range(NODES):
                x += y
            cg = s.end_capture()
        s.synchronize()
    except Exception as e:   # noqa: BLE001
        r = _Row("cupy_replay", "CuPy Graph.launch, per node", "raw_replay", None)
        r.na = f"cupy: {type(e).__name__}"
        groups[0][1].append(r)
        return []

    def c_replay():
        t0 = now_ns()
        for _ in range(reps):
            cg.launch(s)
        s.synchronize()
        return (now_ns() - t0) / (reps * NODES)

    def c_issue():
        t0 = now_ns()
        for _ in range(reps):
            cg.launch(s)
        t = now_ns() - t0
        s.synchronize()
        return t / reps

    groups[0][1].append(_Row("cupy_replay", "CuPy Graph.launch, per node", "raw_replay", c_replay))
    groups[1][1].append(_Row("cupy_issue", "CuPy Graph.launch issue", "raw_issue", c_issue))
    return []


def measure(bc, now_ns, rounds=7, reps=200):
    """{group: [(key, label, median ns, ratio to its raw C row, n/a reason)]}."""
    groups, keep = build_rows(bc, now_ns, reps)
    out = {}
    for title, rows in groups:
        rat = _rounds(rows, rounds)
        out[title] = [(r.key, r.label, _median(r.samples), rat.get(r.key), r.na) for r in rows]
    del keep
    return out


def graph_section(ctx):
    """The ``graph`` section of ``python -m barecuda.bench`` (barecuda/bench/__init__.py)."""
    from barecuda.bench.report import Section, fmt_ns, fmt_x
    rounds = max(3, ctx.settings.rounds)
    res = measure(ctx.bc, ctx.B.now_ns, rounds=rounds)
    data = [{"group": g, "key": k, "label": lab, "median_ns": ns, "ratio": x, "na": na}
            for g, rows in res.items() for k, lab, ns, x, na in rows]
    sec = Section("graph", "CUDA graphs (ns; x = ratio to the raw C row of the group)", [("ns", 10), ("x", 7)],
                  data=data)
    for g, rows in res.items():
        sec.add(f"-- {g}", ["", ""])
        for k, lab, ns, x, na in rows:
            sec.add(lab, f"n/a ({na})" if na else [fmt_ns(ns), fmt_x(x) if x is not None else "ref"])
    return sec


SECTIONS = {"graph": graph_section}
ALIASES = {"graphs": ("graph",)}


def main():
    """``python -m barecuda.bench.graph_rows``: the section on its own, as plain text."""
    import barecuda as bc
    from barecuda.bench import _graphbench
    for g, rows in measure(bc, _graphbench.now_ns).items():
        print(g)
        for k, lab, ns, x, na in rows:
            val = f"n/a ({na})" if na else f"{ns:12.1f}  {'ref' if x is None else f'{x:6.3f}x'}"
            print(f"  {lab:55s} {val}")


if __name__ == "__main__":
    main()
