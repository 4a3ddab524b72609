"""The ``decode`` section: tg128 of Llama-shaped random-weight GGUFs (issue 25).

tg128 = 128 greedy tokens from an empty context (one prompt token), batch 1, median of 5
timed runs after a warm-up. Rows per model (1B and 8B shapes, F16 and Q4_K_M):

- barecuda: ``barecuda.models.llama`` (one graph launch per token), the fused loop (five
  nodes a layer) and, beside it, the unfused one (nine) for the node-count comparison;
- torch eager and torch + CUDA graph (``barecuda.models.torch_llama``, the gpt-fast
  recipe), and torch.compile(mode="reduce-overhead") when asked; torch streams float16
  weights (quantized files dequantized), so its rows are given for F16 files;
- llama.cpp's ``llama-bench`` on the same file (``-p 0 -n 128 -r 5 -fa 1 -ngl 99``) when a
  binary is named (``--llama-bench`` or ``BARECUDA_LLAMA_BENCH``).

Each row: tok/s, % of the bandwidth limit (weight bytes per token / spec, and / the device
copy measured in the same run), the ratio to torch with graphs and to llama.cpp. Files are
written once into ``--dir`` (default ``$BARECUDA_DECODE_DIR`` or the temp dir) with
``synthetic.write_random_llama(fast=True)``.

``python -m barecuda.bench.decode_rows [--shapes 1b,8b] [--types F16,Q4_K_M] [--llama-bench PATH]
[--compile] [--breakdown] [--check] [--json PATH]``; ``python -m barecuda.bench --rows decode``
runs the default set (no compile, no llama.cpp unless the variable names one).
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

from barecuda.bench._kernel_timing import _spec, _time_plans, copy_gbs

__all__ = ["decode_section", "model_file", "SECTIONS"]

COLUMNS = [("tok/s", 7), ("GB/s", 6), ("% spec", 6), ("% copy", 6), ("x torch+graph", 13), ("x llama.cpp", 11),
           ("note", 34)]
ORDER = 90
N_TOKENS, REPEATS, MAX_SEQ = 128, 5, 256


def _say(*a):
    print(*a, flush=True)


def model_file(d, shape, qtype):
    """The random-weight GGUF of ``shape`` ('1b', '8b', ...) and ``qtype`` ('F16', 'Q4_K_M') in ``d``."""
    from barecuda.models.synthetic import SHAPES, write_random_llama
    path = os.path.join(d, f"llama-{shape}-{qtype}-r2.gguf")      # r2: marked as vocabulary-free for llama.cpp
    if not os.path.exists(path):
        t0 = time.perf_counter()
        kw = dict(q4_k_m=True) if qtype == "Q4_K_M" else dict(qtype=qtype)
        write_random_llama(path + ".part", **SHAPES[shape], **kw, seed=25, fast=True, no_vocab=True)
        os.replace(path + ".part", path)
        _say(f"  wrote {path} ({os.path.getsize(path) / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s")
    return path


def weight_bytes(path):
    """Bytes of weights read per token: every tensor but an untied embedding table."""
    from barecuda.models.gguf import open_gguf
    f = open_gguf(path)
    names = list(f.tensors)
    tied = "output.weight" not in names
    return sum(f.tensor(n).nbytes for n in names if n != "token_embd.weight" or tied)


def barecuda_run(path, fused=True, breakdown=False, pdl=False):
    from barecuda.models.llama import Llama
    m = Llama(path, max_seq=MAX_SEQ, fused=fused, pdl=pdl)
    r = m.bench(N_TOKENS, REPEATS)
    r["nodes_per_layer"] = m.nodes_per_layer
    r["load_s"] = m.load_seconds
    from barecuda.models.gguf import LAST_UPLOAD
    r["load_stats"] = dict(LAST_UPLOAD)
    if breakdown:
        r["breakdown"] = node_breakdown(m)
    m.close()
    del m
    gc.collect()
    r["upload_via"] = upload_ways(path)
    return r


def upload_ways(path, ways=("device", "read")):
    """{via: (seconds, bytes, phases)}: gguf.upload of every tensor of the file (in the page
    cache by now) by each way, complete on return; the load rows set them beside the model's."""
    from barecuda.models.gguf import LAST_UPLOAD, open_gguf, upload
    f = open_gguf(path)
    out = {}
    try:
        for via in ways:
            try:
                t0 = time.perf_counter()
                bufs = upload(f, via=via, progress=False)
                out[via] = (time.perf_counter() - t0, LAST_UPLOAD.get("bytes", 0), dict(LAST_UPLOAD))
                del bufs
            except Exception as e:   # noqa: BLE001 -- a row says why instead
                out[via] = (None, 0, {"error": f"{type(e).__name__}: {e}"})
            gc.collect()
    finally:
        f.close()
    return out


def pinned_h2d_gbs(bc, s, nbytes=1 << 30):
    """Host-to-device rate from page-locked memory (one 1 GiB cuMemcpyHtoDAsync, median of 5):
    issue 25's reference for the load target (>= 80% of it from the page cache)."""
    from barecuda._staging import copy_htod
    h = bc.pinned_empty((nbytes,), "uint8")
    h[:] = 1
    d = bc.empty((nbytes,), "uint8", stream=s)
    e0, e1 = bc.Event(timing=True), bc.Event(timing=True)
    ts = []
    for _ in range(6):
        e0.record(s)
        copy_htod(d.ptr, h, s)
        e1.record(s)
        e1.synchronize()
        ts.append(e1.elapsed_ms(e0))
    ts = sorted(ts[1:])
    return nbytes / (ts[len(ts) // 2] * 1e-3) / 1e9


def node_breakdown(m):
    """[(node, us per node, weight bytes per node, GB/s)] for one layer's nodes and the
    head: each kind timed as one graph of that node over every layer (distinct weights,
    so the L2 does not hold them), median of replays, divided by the layer count."""
    import barecuda as bc
    from barecuda.models.llama import _Sampling
    plans = m._plans(_Sampling())
    c = m.cfg
    per = m.nodes_per_layer
    layers = [plans[1 + i * per:1 + (i + 1) * per] for i in range(c.n_layer)]
    head = plans[1 + c.n_layer * per:]
    f = m.file

    def nb(names):
        return sum(f.tensor(n).nbytes for n in names)
    L0 = "blk.0."
    if m.fused:
        kinds = [f"qkv{j}" for j in range(len(m.layers[0]["qkv"]))] + ["attention", "wo+res+norm-in", "glu", "down+res+norm-in"]
        wbytes = [nb([L0 + f"attn_{x}.weight" for x in key]) for key, _ in m._qkv_groups(0)] + [
            0, nb([L0 + "attn_output.weight"]), nb([L0 + "ffn_gate.weight", L0 + "ffn_up.weight"]),
            nb([L0 + "ffn_down.weight"])]
        head_kinds = ["embed+norm-in", "head (scale)", "argmax", "advance"]
    else:
        kinds = (["rmsnorm"] + [f"qkv{j}" for j in range(len(m.layers[0]["qkv"]))] +
                 ["rope", "kv_append", "attention", "wo+res", "rmsnorm", "glu", "down+res"])
        wbytes = [0] + [nb([L0 + f"attn_{x}.weight" for x in key]) for key, _ in m._qkv_groups(0)] + [
            0, 0, 0, nb([L0 + "attn_output.weight"]), 0, nb([L0 + "ffn_gate.weight", L0 + "ffn_up.weight"]),
            nb([L0 + "ffn_down.weight"])]
        head_kinds = ["embedding", "rmsnorm", "head", "argmax", "advance"]
    out = []
    for j, kind in enumerate(kinds):
        us = _time_plans(bc, m.stream, [L[j] for L in layers], reps=9)
        out.append((kind, us, wbytes[j]))
    head_w = f.tensor("output.weight" if not c.tied_output else "token_embd.weight").nbytes
    emb = [plans[0]]
    for kind, p in zip(head_kinds, emb + head):
        b = head_w if kind.startswith("head") else 0
        out.append((kind, _time_plans(bc, m.stream, [p] * 8, reps=9), b))
    return [(k, us, b, (b / (us * 1e-6) / 1e9) if b else 0.0) for k, us, b in out]


def torch_run(path, compiled=False, eager=True, graph=True):
    import torch
    from barecuda.models.torch_llama import TorchLlama
    out = {}
    t = TorchLlama(path, max_seq=MAX_SEQ)
    if eager:
        out["eager"] = t.bench(N_TOKENS, REPEATS, graph=False)["tok_s"]
    if graph:
        out["graph"] = t.bench(N_TOKENS, REPEATS, graph=True)["tok_s"]
    if compiled:
        try:
            t0 = time.perf_counter()
            t.graph = None
            step = t.step
            t.step = torch.compile(step)                   # Inductor's kernels, captured in one CUDA graph
            r = t.bench(N_TOKENS, REPEATS, graph=True)
            out["compile"] = r["tok_s"]
            out["compile_s"] = time.perf_counter() - t0
        except Exception as e:   # noqa: BLE001 -- reported in the row
            out["compile_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    del t
    gc.collect()
    torch.cuda.empty_cache()
    return out


def llama_bench_run(binary, path):
    cmd = [binary, "-m", path, "-p", "0", "-n", str(N_TOKENS), "-r", str(REPEATS), "-fa", "1", "-ngl", "99",
           "-o", "json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        doc = json.loads(p.stdout)
        return float(doc[0]["avg_ts"]), None
    except Exception as e:   # noqa: BLE001 -- reported in the row
        tail = (p.stderr[-300:] if "p" in locals() else "")
        return None, f"{type(e).__name__}: {e} {tail}"


def torch_reference(path, prompt, steps=32):
    """The torch model in float32 on the GPU: (logits at every prompt position [P, vocab],
    the ``steps`` greedy ids after the prompt, the logits each of them was chosen from
    [steps, vocab]); numpy float32. TF32 is off (plain fp32 matmuls)."""
    import numpy as np
    import torch
    from barecuda.models.torch_llama import TorchLlama
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    t = TorchLlama(path, max_seq=len(prompt) + steps + 1, dtype=torch.float32)
    try:
        with torch.inference_mode():
            t.reset(prompt[0])
            logits, greedy, chosen = [], [], []
            for i in range(len(prompt) + steps - 1):
                row = t.step().float().cpu().numpy()
                if i + 1 < len(prompt):
                    logits.append(row)
                    t.tok.fill_(prompt[i + 1])
                else:
                    if i + 1 == len(prompt):
                        logits.append(row)
                    chosen.append(row)
                    greedy.append(int(t.tok))
        return np.stack(logits), greedy, np.stack(chosen)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        del t
        gc.collect()
        torch.cuda.empty_cache()


def greedy_agreement(ids, want_ids, chosen, tol):
    """(steps equal from the start, whether the first difference is a tie: the two best
    reference logits there closer than ``tol`` times the largest logit in magnitude)."""
    import numpy as np
    for i, (a, b) in enumerate(zip(ids, want_ids)):
        if a != b:
            top2 = np.sort(chosen[i])[-2:]
            return i, bool(top2[1] - top2[0] < tol * np.max(np.abs(chosen[i])))
    return min(len(ids), len(want_ids)), None


def check_vs_torch(path, n_prompt=8, steps=32, fp32=True):
    """barecuda against the torch model in float32 on the GPU (issue 25's check at scale).

    float16 (the fused loop): logits at every prompt position, relative to the largest
    torch logit (tolerance 2e-2), and greedy tokens (a first difference where torch's two
    best logits are within the tolerance is a tie). float32 (``fp32=True``: the unfused
    loop with float32 activations, cache and attention): the same logits and the greedy
    tokens, which must all be equal."""
    import numpy as np
    from barecuda.models.gguf import open_gguf
    from barecuda.models.llama import Llama
    from barecuda.models.reference import LlamaConfig
    vocab = LlamaConfig.from_gguf(open_gguf(path)).vocab
    prompt = np.random.default_rng(0).integers(0, vocab, n_prompt).tolist()
    want, want_ids, chosen = torch_reference(path, prompt, steps)
    out = {"steps": steps, "prompt": n_prompt}
    for dtype, tol in (("float16", 2e-2),) + ((("float32", 1e-5),) if fp32 else ()):
        m = Llama(path, max_seq=n_prompt + steps + 1, dtype=dtype)
        got = np.stack(m.prompt_logits(prompt))
        ids = m.generate_ids(prompt, steps)
        m.close()
        del m
        gc.collect()
        same, tie = greedy_agreement(ids, want_ids, chosen, tol)
        key = "" if dtype == "float16" else "fp32_"
        out.update({key + "logits_rel_err": float(np.max(np.abs(got - want)) / np.max(np.abs(want))),
                    key + "greedy_same": same, key + "diverged_on_tie": tie})
    return out


def decode_section(ctx=None, shapes=("1b", "8b"), types=("F16", "Q4_K_M"), directory=None, llama_bench=None,
                   compiled=False, breakdown=False, unfused=True, check=False, progress=True):
    import barecuda as bc
    from barecuda.bench.report import Section
    d = directory or os.environ.get("BARECUDA_DECODE_DIR") or os.path.join(tempfile.gettempdir(), "barecuda-decode")
    os.makedirs(d, exist_ok=True)
    llama_bench = llama_bench or os.environ.get("BARECUDA_LLAMA_BENCH")
    s = bc.Stream()
    card, spec = _spec(bc)
    cp = copy_gbs(bc, s)
    try:
        h2d = pinned_h2d_gbs(bc, s)
    except Exception as e:   # noqa: BLE001 -- the load rows then give GB/s alone
        h2d = None
        _say(f"  pinned host-to-device: {type(e).__name__}: {e}")
    del s
    if progress:
        _say(f"  device copy: {cp:.0f} GB/s on {card} ({bc.Device().name}); pinned host-to-device "
             f"{h2d or 0:.1f} GB/s")
    sec = Section("decode", f"tg{N_TOKENS} decode (batch 1, median of {REPEATS}) on {card}: device copy {cp:.0f} GB/s"
                  + (f" = {100 * cp / spec:.1f}% of {spec:.0f} spec" if spec else ""), COLUMNS, data=[])
    results = {}

    def guarded(what, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except Exception as e:   # noqa: BLE001 -- one failed row does not lose the table
            _say(f"  {what}: {type(e).__name__}: {str(e)[:300]}")
            return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    for shape in shapes:
        torch_f16 = {}
        for qt in types:
            path = model_file(d, shape, qt)
            res = {"weight_bytes": weight_bytes(path), "shape": shape, "type": qt, "card": card, "copy_gbs": cp,
                   "path": path}
            for key, kw in (("barecuda", dict(fused=True, breakdown=breakdown)), ("barecuda_pdl", dict(pdl=True)),
                            ("barecuda_unfused", dict(fused=False, breakdown=breakdown))):
                if key == "barecuda_unfused" and not unfused:
                    continue
                res[key] = guarded(f"{shape} {qt} {key}", barecuda_run, path, **kw)
                if progress and "tok_s" in res[key]:
                    _say(f"  {shape} {qt}: {key} {res[key]['tok_s']:.0f} tok/s")
            if qt == "F16":
                torch_f16 = guarded(f"{shape} {qt} torch", torch_run, path, compiled=compiled)
                if progress:
                    _say(f"  {shape} {qt}: torch {torch_f16}")
            res["torch"] = torch_f16
            if check and (check is True or f"{shape}:{qt}" in check):
                res["check"] = guarded(f"{shape} {qt} check", check_vs_torch, path)
                if progress:
                    _say(f"  {shape} {qt}: vs torch fp32 {res['check']}")
            results[(shape, qt)] = res
    if llama_bench:            # last: a build started beside this run has the most time to finish
        wait = float(os.environ.get("BARECUDA_LLAMA_WAIT", "0"))
        t0 = time.perf_counter()
        while not os.path.exists(llama_bench) and time.perf_counter() - t0 < wait:
            time.sleep(2)
        for (shape, qt), res in results.items():
            res["llama_cpp"], res["llama_cpp_error"] = llama_bench_run(llama_bench, res["path"])
            if progress:
                _say(f"  {shape} {qt}: llama.cpp {res['llama_cpp']} {res['llama_cpp_error'] or ''}")
    for (shape, qt), res in results.items():
        wb = res["weight_bytes"]
        torch_f16 = res["torch"]
        tg = torch_f16.get("graph")
        lc = res.get("llama_cpp")

        def row(label, tps, note=""):
            gbs = wb * tps / 1e9
            sec.add(f"{shape} {qt} {label}", [f"{tps:.0f}", f"{gbs:.0f}",
                                              f"{100 * gbs / spec:.1f}" if spec else "-", f"{100 * gbs / cp:.1f}",
                                              f"{tps / tg:.2f}" if tg else "-", f"{tps / lc:.2f}" if lc else "-",
                                              note])
            sec.data.append({"model": f"{shape} {qt}", "row": label, "tok_s": tps, "weight_bytes": wb,
                             "spec_pct": 100 * gbs / spec if spec else None, "copy_pct": 100 * gbs / cp,
                             "card": card, "note": note})
        for key, label in (("barecuda", "barecuda (fused)"), ("barecuda_pdl", "barecuda (fused + PDL)"),
                           ("barecuda_unfused", "barecuda (unfused)")):
            r = res.get(key)
            if r is None:
                continue
            if "tok_s" in r:
                row(label, r["tok_s"], f"{r['nodes_per_layer']} nodes/layer, {r['nodes_per_token']}/token")
            else:
                sec.add(f"{shape} {qt} {label}", ["-"] * 6 + [r.get("error", "")[:80]])
        r = res.get("barecuda") or {}
        if r.get("load_s"):       # the weights' upload, the file in the page cache (written just before)
            st = r.get("load_stats", {})
            gbs = st.get("bytes", 0) / r["load_s"] / 1e9
            note = ((f"{100 * gbs / h2d:.0f}% of pinned {h2d:.0f} GB/s; " if h2d else "") +
                    f"{st.get('via')} alloc/htod/place {st.get('alloc_s', 0):.2f}/{st.get('htod_s', 0):.2f}/"
                    f"{st.get('place_s', 0):.2f} s")
            sec.add(f"{shape} {qt} load ({st.get('bytes', 0) / 1e9:.1f} GB in {r['load_s']:.2f} s)",
                    ["-", f"{gbs:.1f}", "-", "-", "-", "-", note])
            sec.data.append({"model": f"{shape} {qt}", "row": "load", "load_gbs": gbs, "pinned_h2d_gbs": h2d,
                             "load_pct_pinned": 100 * gbs / h2d if h2d else None, "stats": st, "card": card})
        for via, (secs, nb, st) in sorted((r.get("upload_via") or {}).items()):
            if not secs:
                sec.add(f"{shape} {qt} upload via={via}", ["-"] * 6 + [str(st.get("error", ""))[:80]])
                continue
            gbs = nb / secs / 1e9
            note = ((f"{100 * gbs / h2d:.0f}% of pinned {h2d:.0f} GB/s; " if h2d else "") +
                    f"alloc/htod/place {st.get('alloc_s', 0):.2f}/{st.get('htod_s', 0):.2f}/{st.get('place_s', 0):.2f} s")
            sec.add(f"{shape} {qt} upload via={via} ({nb / 1e9:.1f} GB in {secs:.2f} s)",
                    ["-", f"{gbs:.1f}", "-", "-", "-", "-", note])
            sec.data.append({"model": f"{shape} {qt}", "row": f"upload via={via}", "load_gbs": gbs,
                             "pinned_h2d_gbs": h2d, "load_pct_pinned": 100 * gbs / h2d if h2d else None,
                             "stats": st, "card": card})
        if qt == "F16":
            for key, label in (("eager", "torch eager"), ("graph", "torch + CUDA graph"),
                               ("compile", "torch.compile + CUDA graph")):
                if torch_f16.get(key):
                    row(label, torch_f16[key], "f16 weights")
            for key in ("compile_error", "error"):
                if torch_f16.get(key):
                    sec.add(f"{shape} {qt} torch", ["-"] * 6 + [torch_f16[key][:80]])
        if lc:
            row("llama.cpp llama-bench", lc, "-fa 1 -ngl 99")
        elif llama_bench:
            sec.add(f"{shape} {qt} llama.cpp", ["-"] * 6 + [str(res.get("llama_cpp_error"))[:80]])
    sec.results = results
    return sec


SECTIONS = {"decode": decode_section}


def _print_breakdowns(results):
    for (shape, qt), res in results.items():
        for key in ("barecuda", "barecuda_unfused"):
            bd = res.get(key, {}).get("breakdown")
            if not bd:
                continue
            _say(f"\n  {shape} {qt} {key}: per node (us, weight MB, GB/s); token {1e6 / res[key]['tok_s']:.1f} us")
            for kind, us, b, gbs in bd:
                _say(f"    {kind:22s} {us:8.2f} us {b / 1e6:9.2f} MB {gbs:7.0f} GB/s")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m barecuda.bench.decode_rows", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--types", default="F16,Q4_K_M")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--llama-bench", default=None)
    ap.add_argument("--compile", action="store_true", help="add torch.compile rows (minutes of compiling)")
    ap.add_argument("--breakdown", action="store_true", help="time each node kind (one graph per kind)")
    ap.add_argument("--no-unfused", action="store_true")
    ap.add_argument("--check", default="", help="comma list of shape:type (e.g. 1b:F16,8b:F16) whose logits and "
                    "greedy tokens are checked against torch float32 on the GPU; 'all' for every file")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    sec = decode_section(shapes=a.shapes.split(","), types=a.types.split(","), directory=a.dir,
                         llama_bench=a.llama_bench, compiled=a.compile, breakdown=a.breakdown,
                         unfused=not a.no_unfused,
                         check=True if a.check == "all" else [c for c in a.check.split(",") if c])
    out = sec.format()
    print("\n".join(out) if isinstance(out, list) else out)
    _print_breakdowns(sec.results)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": sec.data, "results": {f"{k[0]} {k[1]}": v for k, v in sec.results.items()}}, fh,
                      indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
