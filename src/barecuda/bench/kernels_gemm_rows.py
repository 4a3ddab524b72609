"""GEMM rows (issue 23): ``matmul`` TFLOP/s and % of the dense tensor peak -- the built-in
kernel and, where libcublasLt loads, the cuBLASLt backend (its plan form, rows marked
``[cublaslt]``) -- beside cuBLAS through ``torch.matmul`` in the same run (GEMM is
compute-bound at these shapes, so L2 rotation does not apply).

Section ``kernels_gemm`` (``--rows kernels_gemm``); ``python -m barecuda.bench.kernels_gemm_rows``
prints the table alone.
"""
from barecuda.bench.report import Section
from barecuda.bench._kernel_timing import _median

ORDER = 61
PEAK_TF = {"H200": 989.0, "H100": 989.0}      # dense fp16/bf16 tensor TFLOP/s (SXM)
SHAPES = (("bfloat16", 4096, 4096, 4096, False, False), ("float16", 4096, 4096, 4096, False, False),
          ("bfloat16", 4096, 4096, 4096, False, True), ("bfloat16", 8192, 8192, 8192, False, False),
          ("bfloat16", 2048, 14336, 4096, False, True), ("float32", 2048, 2048, 2048, False, False))


def _operands(bc, s, dt, m, n, k, ta, tb):
    """A (m x k, or k x m with ta), B (k x n, or n x k with tb), both all 0x3c bytes, and C."""
    a = bc.empty((k, m) if ta else (m, k), dt, stream=s)
    b = bc.empty((n, k) if tb else (k, n), dt, stream=s)
    a.memset(0x3c, stream=s)
    b.memset(0x3c, stream=s)
    return a, b, bc.empty((m, n), dt, stream=s)


def _event_ms(bc, s, call, reps):
    """ms a call of ``call()`` (which queues work on stream s): 2 warm-up calls, then the
    median of 5 event-timed runs of ``reps`` calls."""
    for _ in range(2):
        call()
    e0, e1 = bc.Event(timing=True), bc.Event(timing=True)
    ts = []
    for _ in range(5):
        e0.record(s)
        for _ in range(reps):
            call()
        e1.record(s)
        e1.synchronize()
        ts.append(e1.elapsed_ms(e0) / reps)
    return _median(ts)


def gemm_rows(bc, s, torch=None, shapes=SHAPES, backend="builtin"):
    from barecuda.kernels import _matmul as MM
    rows = []
    for dt, m, n, k, ta, tb in shapes:
        a, b, o = _operands(bc, s, dt, m, n, k, ta, tb)
        p = MM.plan_matmul(a, b, out=o, trans_a=ta, trans_b=tb, stream=s, backend=backend)
        ms = _event_ms(bc, s, p, 10 if dt != "float32" else 3)
        flop = 2.0 * m * n * k
        tf = flop / (ms * 1e-3) / 1e12
        ttf = None
        if torch is not None:
            try:
                tdt = getattr(torch, dt)
                x = torch.ones((k, m) if ta else (m, k), device="cuda", dtype=tdt)
                y = torch.ones((n, k) if tb else (k, n), device="cuda", dtype=tdt)
                xx = x.T if ta else x
                yy = y.T if tb else y
                torch.backends.cuda.matmul.allow_tf32 = False
                for _ in range(3):
                    torch.matmul(xx, yy)
                tts = []
                for _ in range(5):
                    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    t0.record()
                    for _ in range(reps):
                        torch.matmul(xx, yy)
                    t1.record()
                    t1.synchronize()
                    tts.append(t0.elapsed_time(t1) / reps)
                ttf = flop / (_median(tts) * 1e-3) / 1e12
            except Exception as exc:   # noqa: BLE001
                ttf = f"n/a ({type(exc).__name__})"
        label = f"matmul {dt} {m}x{n}x{k}{' ta' if ta else ''}{' tb' if tb else ''}"
        if backend != "builtin":
            label += f" [{backend}]"
        rows.append((label, ms * 1e3, tf, ttf))
    return rows


def issue_rows(bc, s, torch=None, n=500):
    """CPU issue cost (us per call, 64x64x64 bf16, stream-ordered, no sync): the cuBLASLt plan's
    launch (one C call into cublasLtMatmul), the op function on each backend, the builtin
    plan, and torch.matmul(out=) where torch is installed."""
    import time
    from barecuda.kernels import _matmul as MM
    a = bc.empty((64, 64), "bfloat16", stream=s)
    b = bc.empty((64, 64), "bfloat16", stream=s)
    o = bc.empty((64, 64), "bfloat16", stream=s)
    for x in (a, b, o):
        x.memset(0, stream=s)
    lt = MM.plan_matmul(a, b, out=o, backend="cublaslt", stream=s)
    bp = MM.plan_matmul(a, b, out=o, backend="builtin", stream=s)
    cases = [("issue: cuBLASLt plan.launch()", lt.launch),
             ("issue: matmul(backend='cublaslt')", lambda: MM.matmul(a, b, out=o, backend="cublaslt", stream=s)),
             ("issue: builtin plan()", bp),
             ("issue: matmul(backend='builtin')", lambda: MM.matmul(a, b, out=o, backend="builtin", stream=s))]
    if torch is not None:
        x = torch.zeros((64, 64), device="cuda", dtype=torch.bfloat16)
        y = torch.zeros((64, 64), device="cuda", dtype=torch.bfloat16)
        z = torch.zeros((64, 64), device="cuda", dtype=torch.bfloat16)
        cases.append(("issue: torch.matmul(out=)", lambda: torch.matmul(x, y, out=z)))
    rows = []
    for label, f in cases:
        for _ in range(50):
            f()
        s.synchronize()
        if torch is not None:
            torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            ts.append((time.perf_counter() - t0) / n * 1e6)
            s.synchronize()
            if torch is not None:
                torch.cuda.synchronize()
        rows.append((label, _median(ts)))
    return rows


def lt_rank_rows(bc, s, shapes=SHAPES, ranks=8):
    """Developer probe (``--lt-ranks``): each shape's cuBLASLt algorithms by the heuristic's
    rank (``Matmul(heuristic=i)``, i < ranks), each timed alone as ``gemm_rows`` times a plan:
    does the heuristic's first choice (what the backend runs) leave speed behind?"""
    from barecuda.kernels import _cublaslt
    dev = bc.Device()
    rows = []
    for dt, m, n, k, ta, tb in shapes:
        a, b, o = _operands(bc, s, dt, m, n, k, ta, tb)
        reps = 10 if dt != "float32" else 3
        for r in range(ranks):
            try:
                mm = _cublaslt.Matmul(dev, dt, m, n, k, ta, m if ta else k, tb, k if tb else n, n, heuristic=r)
            except ValueError:
                break
            ws = bc.empty((max(1, mm.workspace_size),), "uint8", stream=s)
            ms = _event_ms(bc, s, lambda: mm.run(a.ptr, b.ptr, o.ptr, workspace=ws.ptr,
                                                 workspace_bytes=ws.nbytes, stream=s), reps)
            label = f"matmul {dt} {m}x{n}x{k}{' ta' if ta else ''}{' tb' if tb else ''} [cublaslt rank {r}]"
            rows.append((label, ms * 1e3, 2.0 * m * n * k / (ms * 1e-3) / 1e12, mm.workspace_size))
            del ws
    return rows


def gemm_section(ctx=None):
    import barecuda as bc
    from barecuda.bench.kernels_attention_rows import _torch
    torch = _torch()
    s = bc.Stream()
    name = bc.Device().name
    card = next((c for c in PEAK_TF if c in name), name)
    peak = PEAK_TF.get(card)
    sec = Section("kernels_gemm", f"GEMM ({card})", [("us", 9), ("result", 12), ("% peak", 8), ("cuBLAS", 12),
                                                      ("x cuBLAS", 9)])
    rows = gemm_rows(bc, s, torch)
    from barecuda.kernels import _matmul as MM
    dev = bc.Device()
    if MM.WG and MM._cc(dev) == (9, 0) and MM.wg_smem() <= MM.smem_limit(dev):
        # the rows above ran the wgmma kernel (gemm_sm90.cu); the mma.sync kernel of other GPUs beside it
        MM.WG = 0
        try:
            rows += [(label + " [mma.sync]", us, tf, tt)
                     for label, us, tf, tt in gemm_rows(bc, s, torch, shapes=(SHAPES[0], SHAPES[3]))]
        finally:
            MM.WG = 1
    try:
        from barecuda.kernels import _cublaslt
        lt = _cublaslt.is_available()
    except ImportError:
        lt = False
    if lt:
        rows += gemm_rows(bc, s, torch, backend="cublaslt")
    else:
        sec.notes.append("cuBLASLt rows: libcublasLt not found (pip install nvidia-cublas)")
    for label, us, tf, tt in rows + ([(lab, us, None, None) for lab, us in issue_rows(bc, s, torch)] if lt else []):
        if tf is None:
            sec.add(label, [f"{us:.2f}", "", "", "", ""])
            continue
        tcell = f"{tt:.0f} TF/s" if isinstance(tt, float) else (tt or "")
        x = f"{tf / tt:.2f}" if isinstance(tt, float) else ""
        sec.add(label, [f"{us:.0f}", f"{tf:.1f} TF/s", f"{100 * tf / peak:.0f}%" if peak else "", tcell, x])
    import os
    if os.environ.get("BARECUDA_BENCH_TUNE"):   # developer probe: other pipeline depths, same run
        names = ("BM", "BN", "WARPS_M", "WARPS_N", "BK", "STAGES", "DB", "PF", "GM")
        old = tuple(getattr(MM, n) for n in names)
        wg = MM.WG
        MM.WG = 0                                  # these are mma.sync tiles
        for cfg in ((128, 256, 2, 4, 64, 3, 1, 0, 8), (128, 256, 2, 4, 32, 5, 1, 0, 8), (128, 256, 2, 4, 32, 3, 1, 0, 8),
                    (128, 256, 2, 4, 32, 4, 1, 1, 8), (128, 256, 2, 4, 32, 4, 1, 0, 16),
                    (256, 128, 4, 2, 64, 3, 1, 0, 8), (128, 256, 4, 2, 32, 4, 1, 0, 8)):
            for n, v in zip(names, cfg):
                setattr(MM, n, v)
            try:
                for label, us, tf, _ in gemm_rows(bc, s, None, shapes=(SHAPES[0], SHAPES[2], SHAPES[3])):
                    sec.add(label + " [{}x{} w{}x{} k{} {}st db{} pf{} gm{}]".format(*cfg),
                            [f"{us:.0f}", f"{tf:.1f} TF/s", "", "", ""])
            finally:
                for n, v in zip(names, old):
                    setattr(MM, n, v)
        MM.WG = wg
        wst = MM.WG_STAGES
        for st, gm in ((3, 8), (4, 16)):           # the wgmma kernel's other depth and raster
            if not (wg and MM._cc(dev) == (9, 0)):
                break
            MM.WG_STAGES, MM.GM = st, gm
            try:
                for label, us, tf, _ in gemm_rows(bc, s, None, shapes=(SHAPES[0], SHAPES[3])):
                    sec.add(label + f" [wgmma {st}st gm{gm}]", [f"{us:.0f}", f"{tf:.1f} TF/s", "", "", ""])
            finally:
                MM.WG_STAGES, MM.GM = wst, old[-1]
        if lt:   # small shapes: which backend "auto" should pick (its threshold: 64^3 multiply-adds)
            small = (("bfloat16", 32, 32, 64, False, False), ("bfloat16", 64, 64, 64, False, False),
                     ("bfloat16", 128, 128, 128, False, False), ("bfloat16", 256, 256, 256, False, False),
                     ("bfloat16", 16, 4096, 4096, False, True), ("float32", 64, 64, 64, False, False))
            for backend in ("builtin", "cublaslt"):
                for label, us, tf, _ in gemm_rows(bc, s, None, shapes=small, backend=backend):
                    sec.add(label + ("" if backend != "builtin" else " [builtin]"),
                            [f"{us:.1f}", f"{tf:.2f} TF/s", "", "", ""])
    return sec


SECTIONS = {"kernels_gemm": gemm_section}

def _lt_ranks_main():
    import barecuda as bc
    st = bc.Stream()
    print(f"  {bc.Device().name}", flush=True)
    for label, us, tf, wsz in lt_rank_rows(bc, st):
        print(f"  {label}: {us:.0f} us {tf:.1f} TF/s (workspace {wsz >> 10} KiB)", flush=True)


if __name__ == "__main__":
    import sys
    if "--lt-ranks" in sys.argv:
        _lt_ranks_main()
    else:
        print(gemm_section().format())
