"""``python -m barecuda.bench``: measure, print the table, optionally write JSON and
compare with (or rewrite) the stored baseline of ratios to raw C.

Exit status: 0 when every section ran (and, with ``--baseline``, no ratio regressed
beyond the tolerance), 1 otherwise; 0 with a message when there is no GPU.
"""
import argparse
import json
import sys

DEFAULT_ROWS = "all"


def _parser():
    ap = argparse.ArgumentParser(
        prog="python -m barecuda.bench",
        description="Launch and memory benchmark: barecuda vs raw C vs installed peers (ratios within one run).")
    ap.add_argument("--json", metavar="PATH", help="write every figure and the environment here")
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a rough look in a few seconds)")
    ap.add_argument("--rows", default=DEFAULT_ROWS,
                    help="comma list of sections (see --list); 'all' (default) runs every section")
    ap.add_argument("--rounds", type=int, default=None, help="alternated rounds of the launch rows")
    ap.add_argument("--no-peers", action="store_true",
                    help="skip cuda.core, cuda.bindings, CuPy, PyTorch, Triton, ctypes launch rows")
    ap.add_argument("--baseline", metavar="PATH",
                    help="compare ratios to raw C with this baseline (bench/baseline.json): a pass/fail column, "
                         "exit 1 on a regression beyond its tolerance")
    ap.add_argument("--update-baseline", metavar="PATH",
                    help="write this run's ratios to PATH (the rows of --baseline, or of PATH if it exists)")
    ap.add_argument("--list", action="store_true", help="list the sections and aliases, measure nothing")
    return ap


def main(argv=None):
    args = _parser().parse_args(argv)
    import barecuda as bc
    from barecuda import bench
    from barecuda.bench import report
    from barecuda.bench.harness import say

    names, aliases = bench.section_names()
    if args.list:
        print("sections: " + ", ".join(names))
        print("aliases:  " + ", ".join(f"{a} = {'+'.join(v)}" for a, v in aliases.items()))
        return 0
    rows = None if args.rows.strip() == "all" else [w.strip() for w in args.rows.split(",") if w.strip()]
    if rows is not None:
        unknown = [w for w in rows if w not in names and w not in aliases and w != "peers"]
        if unknown:
            print(f"barecuda.bench: unknown section(s) {', '.join(unknown)}; known: {', '.join(names)}",
                  file=sys.stderr)
            return 2
        rows = [w for w in rows if w != "peers"]     # the old spelling: peers are part of the launch rows
    settings = bench.Settings(args.quick, args.rounds, peers=not args.no_peers)

    if not bc.is_available():
        try:
            bc._loader.load()
            why = "the driver loaded but reports no CUDA device"
        except Exception as e:   # noqa: BLE001 -- the reason is what we report
            why = f"{type(e).__name__}: {e}"
        print(f"barecuda.bench: no usable GPU; nothing measured. Run `python -m barecuda` for details.\n{why}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"env": report.environment(), "skipped": why}, fh, indent=1)
        return 0

    try:
        ctx = bench.Context(settings)
    except Exception as e:   # noqa: BLE001 -- the raw rows need only the driver: say what broke
        import traceback
        traceback.print_exc()
        print(f"barecuda.bench: could not set up the raw C baselines: {bench.why(e)}")
        return 1
    try:
        env, sections, failures = bench.run(rows, settings, ctx)
    finally:
        ctx.close()
    doc = report.document(env, sections, settings)
    status = 1 if failures else 0
    summary = None
    base_path = args.baseline
    if base_path:
        try:
            base = report.load_baseline(base_path)
            results = report.compare_baseline(doc, base)
            sec, summary = report.format_baseline(results, base, base_path)
            sections.append(sec)
            doc["baseline"] = {"path": base_path, "results": results, "summary": summary}
            if any(r[4] == "FAIL" for r in results):
                status = 1
        except (OSError, ValueError, KeyError) as e:
            failures["baseline"] = f"{type(e).__name__}: {e}"
            status = 1
    if args.update_baseline:
        old = None
        for p in (base_path, args.update_baseline):
            try:
                old = report.load_baseline(p) if p else None
            except (OSError, ValueError):
                old = None
            if old:
                break
        new = report.updated_baseline(doc, old)
        with open(args.update_baseline, "w") as fh:
            json.dump(new, fh, indent=1)
            fh.write("\n")
        say(f"barecuda.bench: wrote the baseline {args.update_baseline} ({len(new['rows'])} rows)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1, default=str)
        say(f"barecuda.bench: wrote {args.json}")
    say(f"barecuda.bench: done in {env['elapsed_s']} s")
    print(report.format_table(env, sections, settings, failures))
    if summary:
        print(summary)
    return status


if __name__ == "__main__":
    sys.exit(main())
