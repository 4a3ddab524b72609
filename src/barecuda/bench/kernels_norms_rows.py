"""Row-wise and elementwise kernel rows (issue 23, K1's ops): GB/s and % of spec
bandwidth beside a device-copy row and torch's op in the same run; the op issue cost
beside raw ``cuLaunchKernel`` of the same kernel.

Sections
--------
``kernels_norms``  (``--rows kernels_norms``): each row times one CUDA graph chaining
    one op per buffer set over enough sets that a replay touches >= 512 MB (L2 is
    50-60 MB on H100/H200), so every byte comes from HBM; torch's row is the same chain
    in a torch CUDA graph. Bytes counted: every array read once plus every array written
    (weights included). Decode-shape rows (one row / one token) report the time per op
    with the buffers L2-resident, as in a decode step.
``kernels_issue``  (``--rows kernels_issue``): CPU ns per call to issue the kernel:
    raw C ``cuLaunchKernel`` with a pre-packed parameter block (the floor),
    ``Kernel.launch`` with the op's arguments, the op's plan, and the op function
    (``barecuda.kernels.rmsnorm(x, w, out=y, stream=s)``: a memo hit, kernels/_opcall.pyx)
    beside its Python path (the checks + Kernel.launch, what every call cost before the
    memo), with DeviceBuffers and with torch tensors (against raw C on torch's stream and
    the torch floor: the C reads of the tensors and torch's stream + the raw launch).
    Then each other family's op (matvec dense and Q4_K, matvec_silu_mul, dequantize,
    matmul builtin, attention decode / prefill, kv_append; ``_op_cases``): raw C of the
    kernel its checks return, its hit and its Python path, with DeviceBuffers and torch
    tensors; and matmul on cuBLASLt against ``Matmul.run`` (``cublasLtMatmul``, its floor).

``python -m barecuda.bench.kernels_norms_rows`` prints both.
"""
import ctypes
import math
import struct
import sys

from barecuda.bench.report import Section
from barecuda.bench._kernel_timing import SPEC_GBS, _median, _spec, _time_plans, _torch, copy_gbs, torch_graph_us  # noqa: F401

ORDER = 60
COLUMNS = [("us", 9), ("GB/s", 8), ("% spec", 7), ("torch us", 9), ("torch GB/s", 11), ("vs torch", 9)]
ROTATE_BYTES = 512 << 20


_torch_us = torch_graph_us


def _fill(bc, s, b):
    b.view("uint8").memset(0x3c, stream=s)       # bf16/f16 0x3c3c: ~0.01 / 1.06: finite everywhere
    return b


# ------------------------------------------------------------------ bandwidth rows
def _case(bc, s, K, torch, name, dtype, shape, make, nbytes_op, torch_make=None, decode=False):
    """One row: ``make(bufs) -> plan`` over rotating buffer sets; torch_make(tbufs) -> callable."""
    n = 20 if decode else max(2, math.ceil(ROTATE_BYTES / nbytes_op))
    sets = 1 if decode else n
    bsets = [make_bufs(bc, s, dtype, shape, name) for _ in range(sets)]
    plans = [make(K, bsets[i % sets], s) for i in range(n)]
    us = _time_plans(bc, s, plans)
    del plans, bsets
    tus = None
    if torch is not None and torch_make is not None:
        try:
            tsets = [make_tbufs(torch, dtype, shape, name) for _ in range(sets)]
            fns = [torch_make(torch, tsets[i % sets]) for i in range(n)]

            def body():
                for f in fns:
                    f()
            tus = _torch_us(torch, body, n)
            del fns, tsets
            torch.cuda.empty_cache()
        except Exception as exc:   # noqa: BLE001 -- a bench row, not a test
            tus = f"n/a ({type(exc).__name__})"
    return us, tus


def make_bufs(bc, s, dtype, shape, name):
    rows, cols = shape
    e = lambda sh, dt=dtype: _fill(bc, s, bc.empty(sh, dt, stream=s))   # noqa: E731
    if name.startswith("silu_mul"):
        return {"x": e((rows, 2 * cols)), "y": e((rows, cols))}
    if name.startswith("rope"):
        return {"q": e((rows, 32, 128)), "k": e((rows, 8, 128)), "pos": bc.zeros(1, "int32", stream=s)}
    if name.startswith("embedding"):
        return {"t": e((128256, cols)), "ids": bc.zeros(rows, "int32", stream=s), "y": e((rows, cols))}
    if name.startswith(("argmax", "sample")):
        x = _logits(bc, s, dtype, shape) if name.endswith("_random") else e((rows, cols))
        return {"x": x, "y": bc.empty(rows, "int32", stream=s)}
    return {"x": e((rows, cols)), "r": e((rows, cols)), "w": e(cols), "b": e(cols), "y": e((rows, cols)),
            "h": e((rows, cols))}


def _logits(bc, s, dtype, shape):
    """Logit-like rows: normal with standard deviation 3 (fixed seed), as ``dtype``."""
    import numpy as np
    x = (np.random.default_rng(1).standard_normal(shape) * 3).astype(np.float32)
    if dtype == "float32":
        return bc.to_device(x, stream=s)
    if dtype == "float16":
        return bc.to_device(x.astype(np.float16), stream=s)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    return bc.to_device(bits, stream=s).view("bfloat16", shape=shape)


def make_tbufs(torch, dtype, shape, name):
    dt = getattr(torch, dtype)
    rows, cols = shape
    f = lambda *sh: torch.full(sh, 0.01, device="cuda", dtype=dt)   # noqa: E731
    if name.startswith("silu_mul"):
        return {"x": f(rows, 2 * cols), "y": f(rows, cols)}
    if name.startswith("embedding"):
        return {"t": f(128256, cols), "ids": torch.zeros(rows, device="cuda", dtype=torch.int32), "y": f(rows, cols)}
    if name.startswith(("argmax", "sample")):
        return {"x": f(rows, cols), "y": torch.empty(rows, device="cuda", dtype=torch.int64)}
    return {"x": f(rows, cols), "r": f(rows, cols), "w": f(cols), "b": f(cols), "y": f(rows, cols)}


def _t_rms(torch, b):
    F = torch.nn.functional
    return lambda: F.rms_norm(b["x"], (b["x"].shape[-1],), b["w"], eps=1e-6)


def _t_rms_res(torch, b):
    F = torch.nn.functional

    def f():
        h = b["x"] + b["r"]
        return F.rms_norm(h, (h.shape[-1],), b["w"], eps=1e-6)
    return f


def _t_ln(torch, b):
    F = torch.nn.functional
    return lambda: F.layer_norm(b["x"], (b["x"].shape[-1],), b["w"], b["b"], eps=1e-5)


def _t_softmax(torch, b):
    return lambda: torch.softmax(b["x"], dim=-1, out=None)


def _t_silu_mul(torch, b):
    F = torch.nn.functional
    d = b["y"].shape[-1]
    return lambda: torch.mul(F.silu(b["x"][:, :d]), b["x"][:, d:], out=b["y"])


def _t_add(torch, b):
    return lambda: torch.add(b["x"], b["r"], out=b["y"])


def _t_argmax(torch, b):
    return lambda: torch.argmax(b["x"], dim=-1)


def _t_embedding(torch, b):
    F = torch.nn.functional
    return lambda: F.embedding(b["ids"], b["t"])


CASES = [
    # label, name, dtype, (rows, cols), op -> plan, bytes per op, torch, decode
    ("rmsnorm bf16 32768x4096", "rmsnorm", "bfloat16", (32768, 4096),
     lambda K, b, s: K.rmsnorm.plan(b["x"], b["w"], out=b["y"], stream=s), 2, _t_rms, False),
    ("rmsnorm+residual bf16 32768x4096", "rmsnorm_res", "bfloat16", (32768, 4096),
     lambda K, b, s: K.rmsnorm.plan(b["x"], b["w"], residual=b["r"], residual_out=b["h"], out=b["y"], stream=s),
     4, _t_rms_res, False),
    ("layernorm bf16 32768x4096", "layernorm", "bfloat16", (32768, 4096),
     lambda K, b, s: K.layernorm.plan(b["x"], b["w"], b["b"], out=b["y"], stream=s), 2, _t_ln, False),
    ("softmax bf16 32768x4096", "softmax", "bfloat16", (32768, 4096),
     lambda K, b, s: K.softmax.plan(b["x"], out=b["y"], stream=s), 2, _t_softmax, False),
    ("softmax f32 32768x4096", "softmax", "float32", (32768, 4096),
     lambda K, b, s: K.softmax.plan(b["x"], out=b["y"], stream=s), 2, _t_softmax, False),
    ("softmax bf16 64x128256 (vocab)", "softmax", "bfloat16", (64, 128256),
     lambda K, b, s: K.softmax.plan(b["x"], out=b["y"], stream=s), 2, _t_softmax, False),
    ("silu_mul bf16 8192x14336", "silu_mul", "bfloat16", (8192, 14336),
     lambda K, b, s: K.silu_mul.plan(b["x"], out=b["y"], stream=s), 3, _t_silu_mul, False),
    ("add bf16 32768x4096", "add", "bfloat16", (32768, 4096),
     lambda K, b, s: K.add.plan(b["x"], b["r"], out=b["y"], stream=s), 3, _t_add, False),
    ("rope bf16 8192 tok x (32+8) heads x 128, in place", "rope", "bfloat16", (8192, 40 * 128),
     lambda K, b, s: K.rope.plan(b["q"], b["k"], out=b["q"], out_k=b["k"], pos=b["pos"], stream=s), 2, None, False),
    # decode shapes: one row / one token, L2-resident
    ("decode: rmsnorm bf16 1x4096", "rmsnorm", "bfloat16", (1, 4096),
     lambda K, b, s: K.rmsnorm.plan(b["x"], b["w"], out=b["y"], stream=s), 2, _t_rms, True),
    ("decode: rmsnorm+residual bf16 1x4096", "rmsnorm_res", "bfloat16", (1, 4096),
     lambda K, b, s: K.rmsnorm.plan(b["x"], b["w"], residual=b["r"], residual_out=b["r"], out=b["y"], stream=s),
     4, _t_rms_res, True),
    ("decode: rope bf16 1 tok x (32+8) x 128", "rope", "bfloat16", (1, 40 * 128),
     lambda K, b, s: K.rope.plan(b["q"], b["k"], out=b["q"], out_k=b["k"], pos=b["pos"], stream=s), 2, None, True),
    ("decode: silu_mul bf16 1x14336", "silu_mul", "bfloat16", (1, 14336),
     lambda K, b, s: K.silu_mul.plan(b["x"], out=b["y"], stream=s), 3, _t_silu_mul, True),
    ("decode: embedding bf16 1 tok x 4096", "embedding", "bfloat16", (1, 4096),
     lambda K, b, s: K.embedding.plan(b["t"], b["ids"], out=b["y"], stream=s), 2, _t_embedding, True),
    ("decode: argmax bf16 1x128256", "argmax", "bfloat16", (1, 128256),
     lambda K, b, s: K.argmax.plan(b["x"], out=b["y"], stream=s), 1, _t_argmax, True),
    ("decode: sample bf16 1x128256 (T 0.7)", "sample_random", "bfloat16", (1, 128256),
     lambda K, b, s: K.sample.plan(b["x"], temperature=0.7, seed=1, out=b["y"], stream=s), 1, None, True),
    ("decode: sample bf16 1x128256 (k 40, p 0.9)", "sample_random", "bfloat16", (1, 128256),
     lambda K, b, s: K.sample.plan(b["x"], temperature=0.7, top_k=40, top_p=0.9, seed=1, out=b["y"], stream=s),
     1, None, True),
    ("decode: sample bf16 1x128256 (k 40, p 0.9; every logit equal)", "sample", "bfloat16", (1, 128256),
     lambda K, b, s: K.sample.plan(b["x"], temperature=0.7, top_k=40, top_p=0.9, seed=1, out=b["y"], stream=s),
     1, None, True),
    ("decode: sample bf16 1x128256 (p 0.9 alone)", "sample_random", "bfloat16", (1, 128256),
     lambda K, b, s: K.sample.plan(b["x"], temperature=0.7, top_p=0.9, seed=1, out=b["y"], stream=s),
     1, None, True),
]


def row_sweep(shape=(32768, 4096)):
    """Row kernels built with each tuning define set: ROW_PF (rows prefetched ahead into L2)
    and the register pipeline (SOFTMAX_PIPE / RMS_PIPE / LN_PIPE: the next row's loads in
    flight during the current row's reduction; SOFTMAX_PIPE=2, softmax's default: one row a
    turn with its register cap), launched with one resident wave of looping blocks or one
    block a row; for layernorm also its L2 prefetch distance a block a row (LN_PFD) and the
    looping wave (LN_LOOP=1); prints one line each (us, GB/s, registers, blocks a
    multiprocessor). bf16 rmsnorm (alone and with the residual: 8 bytes an element),
    layernorm, softmax, and f32 softmax."""
    import barecuda as bc
    import barecuda.kernels as K
    from barecuda.kernels import _registry
    s = bc.Stream()
    card, spec = _spec(bc)
    sms = bc.Device().attribute("multiprocessor_count")
    ops = (("rmsnorm", "bfloat16", "norms.cu", "RMS_PIPE", 4,
            lambda b: K.rmsnorm.plan(b["x"], b["w"], out=b["y"], stream=s)),
           ("rmsnorm+res", "bfloat16", "norms.cu", "RMS_PIPE", 8,
            lambda b: K.rmsnorm.plan(b["x"], b["w"], residual=b["r"], residual_out=b["h"], out=b["y"], stream=s)),
           ("layernorm", "bfloat16", "norms.cu", "LN_PIPE", 4,
            lambda b: K.layernorm.plan(b["x"], b["w"], b["b"], out=b["y"], stream=s)),
           ("softmax", "bfloat16", "softmax.cu", "SOFTMAX_PIPE", 4, lambda b: K.softmax.plan(b["x"], out=b["y"], stream=s)),
           ("softmax", "float32", "softmax.cu", "SOFTMAX_PIPE", 8, lambda b: K.softmax.plan(b["x"], out=b["y"], stream=s)))
    rows, cols = shape
    for op, dtype, src, pipe, per, make in ops:
        nbytes = per * rows * cols
        n = max(2, math.ceil(ROTATE_BYTES / nbytes))
        bsets = [make_bufs(bc, s, dtype, shape, "norm") for _ in range(n)]
        base = [make(b) for b in bsets]
        name, block = base[0].kernel.name, base[0].block[0]

        def sweep_row(kern, grid, occ, regs, label):
            """Time kern over this op's buffers (one wave of looping blocks, or a block a
            row) and print its line."""
            g = rows if grid == "rows" else min(rows, max(1, occ) * sms)
            plans = [kern.bind(g, block, *p.args, stream=s) for p in base]
            us = _time_plans(bc, s, plans)
            gbs = nbytes / (us * 1e-6) / 1e9
            print(f"  sweep {op} {dtype} {rows}x{cols} {label} grid={grid}({g}) [{regs} regs, {occ} blk/SM]: "
                  f"{us:.1f} us {gbs:.0f} GB/s {100 * gbs / spec if spec else 0:.1f}% ({name}, block {block})",
                  flush=True)

        for pv in (0, 1, 2) if pipe == "SOFTMAX_PIPE" else (0, 1):
            for pf in (0, 1, 2):
                # softmax's register caps (SOFTMAX_MINB/SOFTMAX_MINB32) belong to its default
                # build (SOFTMAX_PIPE=2); the others are swept without them
                cap = (("SOFTMAX_MINB", 0), ("SOFTMAX_MINB32", 0)) if pipe == "SOFTMAX_PIPE" and pv != 2 else ()
                kern = _registry.get(src, name, (("ROW_PF", pf), (pipe, pv)) + cap)
                try:
                    occ = kern.max_active_blocks_per_sm(block)
                    regs = kern.attribute("num_regs")
                except Exception:   # noqa: BLE001
                    occ = regs = -1
                for grid in ("wave", "rows"):
                    if grid == "rows" and pf:
                        continue            # a block a row: nothing to prefetch
                    if grid == "wave" and pipe in ("RMS_PIPE", "LN_PIPE") and not pv:
                        continue            # the load-at-use builds do not loop over rows (LN_LOOP=0)
                    sweep_row(kern, grid, occ, regs, f"{pipe}={pv} ROW_PF={pf}")
        if pipe == "LN_PIPE":
            # layernorm's load-at-use path: a block a row prefetching LN_PFD x multiprocessors rows
            # ahead (the default 4), and the looping wave with ROW_PF's next row (the default before)
            for defs, grid in [((("LN_PFD", d),), "rows") for d in (0, 2, 4, 6)] + \
                    [((("LN_LOOP", 1), ("LN_MINB", 0)), "wave")]:
                kern = _registry.get(src, name, defs)
                occ, regs = kern.max_active_blocks_per_sm(block), kern.attribute("num_regs")
                sweep_row(kern, grid, occ, regs, " ".join(f"{k}={v}" for k, v in defs))
        del base, bsets


def norms_section(ctx=None, only=None):
    import barecuda as bc
    import barecuda.kernels as K
    torch = _torch()
    s = bc.Stream()
    card, spec = _spec(bc)
    cp = copy_gbs(bc, s)
    sec = Section("kernels_norms", f"norms / softmax / elementwise on {card} (device copy {cp:.0f} GB/s"
                  + (f" = {100 * cp / spec:.1f}% of {spec:.0f} spec)" if spec else ")"), COLUMNS, data=[])
    sec.add("device copy 1 GiB (read+write)", ["", f"{cp:.0f}", f"{100 * cp / spec:.1f}" if spec else "-", "", "", ""])
    for label, name, dtype, shape, make, nt, tmake, decode in CASES:
        if only and not any(o in label for o in only):
            continue
        rows, cols = shape
        isz = 4 if dtype == "float32" else 2
        nbytes = nt * rows * cols * isz
        if name.startswith(("argmax", "sample")):
            nbytes = rows * cols * isz
        if name == "embedding":
            nbytes = 2 * rows * cols * isz
        try:
            us, tus = _case(bc, s, K, torch, name, dtype, shape, make, nbytes, tmake, decode)
        except Exception as exc:   # noqa: BLE001 -- one failing row does not end the section
            sec.add(label, [f"n/a ({type(exc).__name__}: {exc})"[:60], "", "", "", "", ""])
            continue
        gbs = nbytes / (us * 1e-6) / 1e9
        pct = f"{100 * gbs / spec:.1f}" if spec else "-"
        if isinstance(tus, (int, float)):
            tcol, tg, ratio = f"{tus:.1f}", f"{nbytes / (tus * 1e-6) / 1e9:.0f}", f"{tus / us:.2f}x"
        else:
            tcol, tg, ratio = (tus or "-"), "-", "-"
        sec.add(label, [f"{us:.2f}", f"{gbs:.0f}", pct, tcol, tg, ratio])
        sec.data.append({"label": label, "us": us, "bytes": nbytes, "gbs": gbs,
                         "spec_pct": 100 * gbs / spec if spec else None, "decode": decode,
                         "torch_us": tus if isinstance(tus, (int, float)) else None, "copy_gbs": cp, "card": card})
    return sec


# ------------------------------------------------------------------ issue cost
def _rms_params(B, y, x, w):
    """rmsnorm_f32_v1's parameter block for y = rmsnorm(x (1x64), w), packed here."""
    return B.ParamBlock([struct.pack("<Q", y), bytes(8), struct.pack("<Q", x), bytes(8), struct.pack("<Q", w),
                         struct.pack("<i", 64), struct.pack("<q", 64), bytes(8), struct.pack("<q", 64), bytes(8),
                         struct.pack("<f", 1e-6), struct.pack("<q", 1)])


def _torch_rows(B, K, k, tb, torch):
    """The op with torch tensors on torch's current (non-blocking) stream, beside raw C
    on that stream and the torch floor: a C method that reads the 3 tensors and torch's
    current stream through DLPack's C exchange API and makes the raw launch (what any
    binding honouring torch's stream rule must do; bench/_baseline.LaunchFloor)."""
    from barecuda.bench.harness import c_row, na_row, py_row
    from barecuda.bench.peers import torch_stream_switch
    ts = torch.cuda.Stream(device=0)
    with torch.cuda.stream(ts):
        tx, tw, ty = torch.zeros(1, 64, device="cuda:0"), torch.zeros(64, device="cuda:0"), torch.zeros(1, 64, device="cuda:0")
    ts.synchronize()
    setup, teardown = torch_stream_switch(torch, ts)
    h = ts.cuda_stream
    pb = _rms_params(B, ty.data_ptr(), tx.data_ptr(), tw.data_ptr())
    # the floor writes the 3 tensors' addresses into slots 0-2: y, (hout: unused without a residual), x
    floor_label = "torch floor: C reads of 3 tensors + stream, raw launch"
    try:
        fl = B.LaunchFloor(k.handle, 1, tb, _rms_params(B, 0, 0, tw.data_ptr()), h, [ty, tw, tx])
    except TypeError as exc:     # torch before 2.10: no DLPack C exchange API to read with
        fl, floor = None, na_row("floor_rms_torch", floor_label, "raw_rms_ts", str(exc))
    tns = {"K": K, "x": tx, "w": tw, "y": ty, "s": ts, "torch": torch, "fl": fl, "tb": tb}
    if fl is not None:
        floor = py_row("floor_rms_torch", floor_label, "fl.launch(1, tb, y, w, x, stream=s)", tns,
                       "s.synchronize()", ref="raw_rms_ts")
    rows = [c_row(B, "raw_rms_ts", f"raw C cuLaunchKernel ({k.name}), torch's stream", k.handle, 1, tb, pb, h),
            floor,
            py_row("op_rms_torch", "K.rmsnorm(x, w, out=y, stream=s), torch tensors",
                   "K.rmsnorm(x, w, out=y, stream=s)", tns, "s.synchronize()", ref="floor_rms_torch"),
            _python_path_row("slow_rms_torch", tns, "floor_rms_torch"),
            py_row("torch_rms", "torch.nn.functional.rms_norm(x, (64,), w) (for scale)",
                   "torch.nn.functional.rms_norm(x, (64,), w, eps=1e-6)", tns, "s.synchronize()", ref="raw_rms_ts")]
    for r in rows:
        r.setup, r.teardown = setup, teardown
    return rows, (tx, tw, ty, ts, fl, pb)


def _python_path_row(key, ns, ref):
    """The row of what every rmsnorm call cost before the op memo: its Python checks
    (``K.rmsnorm.prep``), then ``Kernel.launch`` of what they return."""
    from barecuda.bench.harness import py_row
    return py_row(key, "  its Python checks + Kernel.launch (the path before the memo)",
                  "g = K.rmsnorm.prep(x, w, out=y, stream=s); g[0].launch(g[1], g[2], *g[3], stream=s)", ns,
                  "s.synchronize()", ref=ref)


# the other families' ops (issue 23: every op's issue cost <= 1.10x raw): name -> (op, arguments);
# small shapes, so that the GPU keeps up with the issue loop
def _op_cases(bc, qw_of):
    from barecuda.kernels import _attention as KA, _dequant as KD, _matmul as KMM, _matvec as KM
    e = bc.empty
    return {
        "matvec": ("matvec f16 256x256", KM.matvec,
                   lambda t: ((t((256, 256), "float16"), t(256, "float16")), {"out": t(256, "float16")})),
        "matvec_q4k": ("matvec Q4_K 256x256, x f16 (QuantWeight)", KM.matvec,
                       lambda t: ((qw_of(256, 256), t(256, "float16")), {"out": t(256, "float16")})),
        "matvec_silu_mul_q4k": ("matvec_silu_mul Q4_K 256x256 (QuantWeights)", KM.matvec_silu_mul,
                                lambda t: ((qw_of(256, 256), qw_of(256, 256), t(256, "float16")),
                                           {"out": t(256, "float16")})),
        "dequantize_q4k": ("dequantize Q4_K 64x256 -> f16", KD.dequantize,
                           lambda t: ((qw_of(64, 256),), {"out": t((64, 256), "float16")})),
        "matmul": ("matmul f16 64x64x64, builtin (tensor cores)", KMM.matmul,
                   lambda t: ((t((64, 64), "float16"), t((64, 64), "float16")),
                              {"out": t((64, 64), "float16"), "backend": "builtin"})),
        "attn_decode": ("attention_decode f16 8/2 heads d64, 64 tokens, 1 split", KA.attention_decode,
                        lambda t: ((t((8, 64), "float16"), t((64, 2, 64), "float16"), t((64, 2, 64), "float16"),
                                    bc.zeros(1, "int32")), {"out": t((8, 64), "float16"), "n_splits": 1})),
        "attn_decode_ws": ("attention_decode f16 8/2 heads d64, 1024 tokens, 4 splits, workspace=",
                           KA.attention_decode,
                           lambda t: ((t((8, 64), "float16"), t((1024, 2, 64), "float16"),
                                       t((1024, 2, 64), "float16"), bc.zeros(1, "int32")),
                                      {"out": t((8, 64), "float16"), "n_splits": 4,
                                       "workspace": bc.zeros(KA.decode_workspace_size(8, 2, 64, 4), "uint8")})),
        "attn_prefill": ("attention_prefill f16 64 tokens 4/2 heads d64, causal", KA.attention_prefill,
                         lambda t: ((t((64, 4, 64), "float16"), t((64, 2, 64), "float16"), t((64, 2, 64), "float16")),
                                    {"out": t((64, 4, 64), "float16")})),
        "kv_append": ("kv_append f16 2 heads d64", KA.kv_append,
                      lambda t: ((t((2, 64), "float16"), t((2, 64), "float16"), t((64, 2, 64), "float16"),
                                  t((64, 2, 64), "float16"), bc.zeros(1, "int32")), {})),
    }, e


def _pack(B, k, args):
    """The parameter block of kernel k for the launch arguments a prep returned."""
    parts = []
    for (off, size, _t), a in zip(k.param_info(), args):
        if type(a) is ctypes.c_float or isinstance(a, float):
            parts.append(struct.pack("<f", float(a.value if type(a) is ctypes.c_float else a)))
        elif isinstance(a, int):
            parts.append((a & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))
        else:
            parts.append(struct.pack("<Q", a.ptr))
    return B.ParamBlock(parts)


def _raw_row(B, key, label, g, stream):
    """Raw C cuLaunchKernel of what the op's checks return (kernel, grid, block, args, result[, smem])."""
    from barecuda.bench.harness import Row
    k, grid, block, args = g[:4]
    smem = g[5] if len(g) > 5 else 0
    pb = _pack(B, k, args)
    r = Row(key, label)
    r.stmt = "C loop: cuLaunchKernel with a pre-packed void**"
    r.issue = lambda nb, bs: [t / bs for t in B.launch_batches(k.handle_int, grid, block, pb, stream, nb, bs,
                                                                 shared_mem=smem)]
    r.sync = lambda: B.stream_sync(stream)
    r._keep = (pb, g)
    return r


def _launch_call(g, given, tensors):
    """(names, statement) of ``Kernel.launch`` of what a prep returned, the arguments
    spelled out (a c_float as its value, as the op's record packs it); with ``tensors``,
    an argument buffer at the address of one of the caller's tensors (``given``) is that
    tensor."""
    k, grid, block, args = g[:4]
    ns = {"KL": k, "G": grid, "BL": block}
    names = []
    for i, a in enumerate(args):
        if type(a) is ctypes.c_float:
            a = a.value
        if tensors and hasattr(a, "ptr"):
            a = next((t for t in given if hasattr(t, "data_ptr") and t.data_ptr() == a.ptr), a)
        ns[f"a{i}"] = a
        names.append(f"a{i}")
    tail = ", stream=s" + (f", shared_mem={int(g[5])}" if len(g) > 5 and g[5] else "")
    return ns, f"KL.launch(G, BL, {', '.join(names)}{tail})"


def _family_rows(B, bc, s, torch, ts):
    """For each op of _op_cases: raw C of its kernel on s, Kernel.launch and the plan of the
    same launch, the op's hit with DeviceBuffers on s, and (where torch is there and the op
    takes tensors) raw C on torch's stream, Kernel.launch with the caller's tensors and the
    hit with torch tensors on it. Returns (rows, raw_of, keep)."""
    from barecuda.bench.harness import na_row, py_row
    from barecuda.kernels import _dequant as KD

    def qw_of(n, k):
        return KD.QuantWeight(bc.zeros(n * k // 256 * 144, "uint8", stream=s), "q4_k", (n, k))
    cases, _ = _op_cases(bc, qw_of)
    rows, raw_of, keep = [], {}, []

    def buf(shape, dt):
        return bc.zeros(shape, dt, stream=s)

    def tens(shape, dt):
        with torch.cuda.stream(ts):
            return torch.zeros(shape if isinstance(shape, tuple) else (shape,), device="cuda:0",
                               dtype=getattr(torch, dt))
    kinds = [("", buf, s)] + ([("_torch", tens, ts)] if torch is not None else [])
    for name, (label, fn, make) in cases.items():
        for suf, t, st in kinds:
            if suf and name in ("matvec_silu_mul_q4k",):
                continue
            try:
                args, kw = make(t)
                kw = dict(kw, stream=st)
                g = fn.prep(*args, **kw)
                sk = st if not suf else st.cuda_stream
                raw = _raw_row(B, f"raw_{name}{suf}", f"raw C cuLaunchKernel ({g[0].name})"
                               + (", torch's stream" if suf else ""), g, sk)
            except Exception as exc:   # noqa: BLE001
                rows.append(na_row(f"op_{name}{suf}", label, None, f"{type(exc).__name__}: {exc}"))
                continue
            ns = {"OP": fn, "s": st}
            call = []
            for i, a in enumerate(args):
                ns[f"a{i}"] = a
                call.append(f"a{i}")
            for kk, v in kw.items():
                ns[f"k_{kk}"] = v
                call.append(f"{kk}=k_{kk}")
            stmt = f"OP({', '.join(call)})"
            sync = "s.synchronize()"
            op = py_row(f"op_{name}{suf}", f"{label}{', torch tensors' if suf else ''}: op hit", stmt, ns, sync,
                        ref=raw.key)
            slow = py_row(f"slow_{name}{suf}", "  its Python checks + Kernel.launch (the path before the memo)",
                          f"g = OP.prep({', '.join(call)}); g[0].launch(g[1], g[2], *g[3], stream=s, "
                          f"shared_mem=g[5] if len(g) > 5 else 0)", ns, sync, ref=raw.key)
            # the floors of the same launch in the same run: Kernel.launch with the arguments
            # spelled out (for torch tensors: the caller's tensors in the array slots, the
            # floor any binding honouring torch's stream rule has) and, for DeviceBuffers, the
            # plan of it (Kernel.bind)
            lns, lcall = _launch_call(g, [a for a in list(args) + list(kw.values()) if not isinstance(a, int)],
                                      bool(suf))
            lns.update(s=st)
            extra = [py_row(f"launch_{name}{suf}", "  Kernel.launch of the same kernel"
                            + (", the caller's tensors" if suf else "") + f" ({len(g[3])} args)",
                            lcall, lns, sync, ref=raw.key)]
            if not suf:
                pns = {"s": st, "P": g[0].bind(g[1], g[2], *g[3], stream=st, shared_mem=g[5] if len(g) > 5 else 0)}
                extra.append(py_row(f"plan_{name}", "  its plan (Kernel.bind(...)())", "P()", pns, sync, ref=raw.key))
            for r in [raw, op, slow] + extra:
                raw_of[r.key] = raw.key
            if suf:
                from barecuda.bench.peers import torch_stream_switch
                setup, teardown = torch_stream_switch(torch, ts)
                for r in [raw, op, slow] + extra:
                    r.setup, r.teardown = setup, teardown
            rows += [raw] + extra + [op, slow]
            keep.append((args, kw, g))
    return rows, raw_of, keep


def _lt_rows(B, bc, s, torch=None, ts=None):
    """matmul(backend='cublaslt'): a cuBLASLt call, not a kernel launch: its floor is
    cublasLtMatmul itself (Matmul.run with the pointers read beforehand, on the same stream);
    the op's hit issues the recorded call (kernels/_oplt.pyx), its Python path runs the
    checks and Matmul.run each call (``K.matmul.prep``). With torch: the same with torch
    tensors on torch's stream (the floor: Matmul.run with their pointers read beforehand)."""
    from barecuda.bench.harness import na_row, py_row
    from barecuda.kernels import _matmul as KMM
    a, b, o = (bc.zeros((256, 256), "float16", stream=s) for _ in range(3))
    try:
        KMM.matmul(a, b, out=o, backend="cublaslt", stream=s)
        mm = next(iter(KMM._lt_cache.values()))
        ws = KMM._lt_workspace(a.device, s, mm.workspace_size)
    except Exception as exc:   # noqa: BLE001
        return [na_row("lt_floor", "cuBLASLt matmul", None, f"{type(exc).__name__}: {exc}")], {}, None
    ns = {"K": KMM, "a": a, "b": b, "o": o, "s": s, "mm": mm, "ws": ws}
    sync = "s.synchronize()"
    rows = [py_row("lt_floor", "cublasLtMatmul f16 256^3 (Matmul.run, pointers pre-read)",
                   "mm.run(a.ptr, b.ptr, o.ptr, 1.0, 0.0, ws.ptr, ws.nbytes, s)", ns, sync),
            py_row("op_lt", "matmul(a, b, out=o, backend='cublaslt', stream=s), DeviceBuffers: op hit",
                   "K.matmul(a, b, out=o, backend='cublaslt', stream=s)", ns, sync, ref="lt_floor"),
            py_row("slow_lt", "  its Python path (checks + Matmul.run: every call before the record)",
                   "K.matmul.prep(a, b, out=o, backend='cublaslt', stream=s)", ns, sync, ref="lt_floor"),
            py_row("op_lt_new", "  matmul(a, b, backend='cublaslt', stream=s), a new output each call",
                   "K.matmul(a, b, backend='cublaslt', stream=s)", ns, sync, ref="lt_floor")]
    raw_of = {r.key: "lt_floor" for r in rows}
    keep = [a, b, o, ws]
    if torch is not None:
        from barecuda.bench.peers import torch_stream_switch
        with torch.cuda.stream(ts):
            ta, tb, to = (torch.zeros(256, 256, device="cuda:0", dtype=torch.float16) for _ in range(3))
        ts.synchronize()
        KMM.matmul(ta, tb, out=to, backend="cublaslt", stream=ts)
        wst = KMM._lt_workspace(a.device, ts, mm.workspace_size)
        tns = {"K": KMM, "ta": ta, "tb": tb, "to": to, "s": ts, "mm": mm, "ws": wst, "h": ts.cuda_stream,
               "pa": ta.data_ptr(), "pb": tb.data_ptr(), "po": to.data_ptr()}
        trows = [py_row("lt_floor_ts", "cublasLtMatmul f16 256^3 on torch's stream (Matmul.run, pointers pre-read)",
                        "mm.run(pa, pb, po, 1.0, 0.0, ws.ptr, ws.nbytes, h)", tns, sync),
                 py_row("op_lt_torch", "matmul(ta, tb, out=to, backend='cublaslt', stream=ts), torch tensors: "
                        "op hit", "K.matmul(ta, tb, out=to, backend='cublaslt', stream=s)", tns, sync,
                        ref="lt_floor_ts"),
                 py_row("slow_lt_torch", "  its Python path (checks + Matmul.run)",
                        "K.matmul.prep(ta, tb, out=to, backend='cublaslt', stream=s)", tns, sync,
                        ref="lt_floor_ts")]
        setup, teardown = torch_stream_switch(torch, ts)
        for r in trows:
            r.setup, r.teardown = setup, teardown
            raw_of[r.key] = "lt_floor_ts"
        rows += trows
        keep += [ta, tb, to, wst]
    return rows, raw_of, keep


def issue_section(ctx=None, rounds=10):
    """Issue cost of rmsnorm (f32 1x64): the op function against raw C of the same kernel
    and the plan, with DeviceBuffers (on a barecuda Stream) and torch tensors (on torch's
    stream, against raw C there and the torch floor). Columns: ns per call, x raw C of the
    same kernel on the same stream, x the row's own reference (the floor for the torch op)."""
    import barecuda as bc
    import barecuda.kernels as K
    from barecuda.bench import _baseline as B
    from barecuda.bench.harness import c_row, py_row, run_rounds, round_ratio
    from barecuda.bench.report import fmt_ns, fmt_x
    s = bc.Stream()
    x = bc.zeros((1, 64), "float32", stream=s)
    w = bc.zeros(64, "float32", stream=s)
    y = bc.zeros((1, 64), "float32", stream=s)
    plan = K.rmsnorm.plan(x, w, out=y, stream=s)
    k, args, tb = plan.kernel, tuple(plan.args), plan.block[0]
    pb = _rms_params(B, y.ptr, x.ptr, w.ptr)
    # Kernel.launch with the 12 arguments spelled out, eps a Python float (a PTX kernel's f32
    # slot: what the op's recorded launch packs too)
    lit = [a.value if type(a) is ctypes.c_float else a for a in args]
    ns = {"k": k, "s": s, "x": x, "w": w, "y": y, "K": K, "p": plan, "tb": tb}
    ns.update({f"a{i}": a for i, a in enumerate(lit)})
    call = f"k.launch(1, tb, {', '.join(f'a{i}' for i in range(len(lit)))}, stream=s)"
    rows = [c_row(B, "raw_rms", f"raw C cuLaunchKernel ({k.name}, 12 args)", k.handle, 1, tb, pb, s),
            py_row("launch_rms", "Kernel.launch(1, block, 12 args)", call, ns, "s.synchronize()", ref="raw_rms"),
            py_row("plan_rms", "rmsnorm.plan(...)() (LaunchPlan)", "p()", ns, "s.synchronize()", ref="raw_rms"),
            py_row("op_rms", "K.rmsnorm(x, w, out=y, stream=s), DeviceBuffers",
                   "K.rmsnorm(x, w, out=y, stream=s)", ns, "s.synchronize()", ref="raw_rms"),
            _python_path_row("slow_rms", ns, "raw_rms"),
            py_row("op_rms_launch", "  the same hit issued through Kernel.launch (_opcall.set_direct(False))",
                   "K.rmsnorm(x, w, out=y, stream=s)", ns, "s.synchronize()", ref="raw_rms"),
            py_row("op_rms_new", "K.rmsnorm(x, w, stream=s), a new output each call",
                   "K.rmsnorm(x, w, stream=s)", ns, "s.synchronize()", ref="raw_rms")]
    from barecuda.kernels import _opcall
    rows[-2].setup, rows[-2].teardown = (lambda: _opcall.set_direct(False)), (lambda: _opcall.set_direct(True))
    keep = None
    torch = _torch()
    if torch is not None:
        trows, keep = _torch_rows(B, K, k, tb, torch)
        rows += trows
    raw_of = {r.key: ("raw_rms_ts" if r.key.endswith(("_ts", "_torch")) or r.key == "torch_rms" else "raw_rms")
              for r in rows}
    ts = torch.cuda.Stream(device=0) if torch is not None else None
    frows, fraw, fkeep = _family_rows(B, bc, s, torch, ts)
    lrows, lraw, lkeep = _lt_rows(B, bc, s, torch, ts)
    rows += frows + lrows
    raw_of.update(fraw)
    raw_of.update(lraw)
    st = getattr(ctx, "settings", None)
    run_rounds(rows, getattr(st, "rounds", None) or rounds, 5, 0, 0, B.ctx_sync)
    by = {r.key: r for r in rows if not r.na}

    def x_of(key, ref):
        if key not in by or ref not in by:
            return None
        return round_ratio(by[key].samples["issue"], by[ref].samples["issue"])

    def spread_of(key, ref):
        """(lowest, highest) per-round ratio of key to ref (the median is x raw)."""
        if key not in by or ref not in by or key == ref:
            return None
        a, b = by[key].samples["issue"], by[ref].samples["issue"]
        rs = [x / y for x, y in zip(a, b) if y]
        return (min(rs), max(rs)) if rs else None
    data = []
    sec = Section("kernels_issue", "op issue cost, CPU ns per call (rmsnorm f32 1x64, then each other family's op; "
                  "x raw C of the same kernel on the same stream, the median of the per-round ratios; rounds: "
                  "the lowest-highest per-round ratio; x ref: the row's reference, the torch floor for "
                  "rmsnorm's torch tensors)",
                  [("issue", 9), ("x raw", 7), ("rounds", 13), ("x ref", 7)], data=data,
                  notes=["target (issue 23): the op function <= 1.10x raw C; torch tensors: against the torch floor "
                         "(what reading 3 tensors and torch's stream in C costs)"])
    for r in rows:
        if r.na:
            sec.add(r.label, f"n/a ({r.na})")
            continue
        xr, xf = x_of(r.key, raw_of.get(r.key, "")), (x_of(r.key, r.ref) if r.ref else None)
        sp = spread_of(r.key, raw_of.get(r.key, ""))
        sec.add(r.label + ("" if r.ref else " (ref)"),
                [fmt_ns(r.result()["issue"]), fmt_x(xr), "-" if sp is None else f"{sp[0]:.3f}-{sp[1]:.3f}", fmt_x(xf)])
        data.append({"key": r.key, "label": r.label, "issue_ns": r.result()["issue"], "x_raw": xr, "x_ref": xf,
                     "x_raw_rounds": list(sp) if sp else None, "ref": r.ref})
    del keep, fkeep, lkeep
    return sec


SECTIONS = {"kernels_norms": norms_section, "kernels_issue": issue_section}
ALIASES = {"norms": ("kernels_norms", "kernels_issue")}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    if "--sweep" in sys.argv:
        row_sweep()
    if "--issue-only" not in sys.argv:
        print("\n".join(norms_section(only=args or None).format()))
    if "--no-issue" not in sys.argv:
        print("\n".join(issue_section().format()))
