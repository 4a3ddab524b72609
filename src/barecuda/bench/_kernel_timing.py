"""What the kernel benchmark rows share: the device's spec bandwidth, medians, a chain of
plans timed as one graph, the device-copy bandwidth row, torch when installed, torch's
ops timed as one CUDA graph."""

SPEC_GBS = {"H200": 4800.0, "H100": 3350.0}          # HBM spec bandwidth, GB/s


def _spec(bc):
    name = bc.Device().name
    for k in SPEC_GBS:
        if k in name:
            return k, SPEC_GBS[k]
    return name, None


def _median(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2]


def _chain(g, plans):
    """Add the plans to graph g as a chain of kernel nodes, in order."""
    prev = None
    for p in plans:
        prev = g.add_plan(p, depends_on=prev) if prev is not None else g.add_plan(p)


def _time_graph(bc, s, fn_nodes, reps=20):
    """ms per replay of a graph built by fn_nodes(graph) (median of reps)."""
    g = bc.Graph()
    fn_nodes(g)
    return _time_exe(bc, s, g.instantiate(), reps)


def _time_exe(bc, s, exe, reps=20):
    """ms per replay of the executable graph exe on stream s: one warm-up launch, then the
    median of reps launches, each timed by an event pair."""
    exe.launch(s)
    s.synchronize()
    e0, e1 = bc.Event(timing=True), bc.Event(timing=True)
    ts = []
    for _ in range(reps):
        e0.record(s)
        exe.launch(s)
        e1.record(s)
        e1.synchronize()
        ts.append(e1.elapsed_ms(e0))
    return _median(ts)


def _time_plans(bc, s, plans, reps=15):
    """microseconds per plan: one graph chaining the plans, median over replays."""
    return _time_graph(bc, s, lambda g: _chain(g, plans), reps) * 1e3 / len(plans)


def copy_gbs(bc, s, nbytes=1 << 30):
    a = bc.empty((nbytes,), "uint8", stream=s)
    b = bc.empty((nbytes,), "uint8", stream=s)
    a.memset(1, stream=s)
    b.copy_from(a, stream=s)
    s.synchronize()
    e0, e1 = bc.Event(timing=True), bc.Event(timing=True)
    ts = []
    for _ in range(7):
        e0.record(s)
        b.copy_from(a, stream=s)
        e1.record(s)
        e1.synchronize()
        ts.append(e1.elapsed_ms(e0))
    return 2 * nbytes / (_median(ts) * 1e-3) / 1e9


def load_source(bc, source, name, options=()):
    """The Module of one of the bench's own CUDA sources (the floor kernels), compiled for the
    current device as ``Program.compile()`` chooses; when the driver refuses that cubin (the
    driver double loads PTX only), PTX for the device's architecture, as the kernel registry
    falls back."""
    prog = bc.Program(source, name=name, options=list(options))
    try:
        return prog.compile().load()
    except bc.CudaError:
        major, minor = bc.Device().compute_capability
        return prog.compile("ptx", arch=f"compute_{major}{minor}").load()


def _torch():
    try:
        import torch
        if torch.cuda.is_available():
            return torch
    except Exception:   # noqa: BLE001
        pass
    return None


def torch_graph(torch, body):
    """``body()`` run once on a side stream (torch's warm-up rule for capture), then
    captured in a torch ``CUDAGraph``, returned after a device sync (the torch rows of
    the kernel and graph sections)."""
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        body()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize()
    return g


def torch_graph_us(torch, body, count, reps=15):
    """microseconds per op of ``body()`` (which issues ``count`` ops) captured in a torch CUDA
    graph, median over replays (the torch rows beside the kernel rows)."""
    g = torch_graph(torch, body)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    del g
    return _median(ts) * 1e3 / count
