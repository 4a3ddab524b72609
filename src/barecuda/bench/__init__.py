"""barecuda's benchmark wing: ``python -m barecuda.bench``.

Measures the CPU cost of launching a kernel from Python with barecuda next to a raw
C loop calling the same driver entry point with a pre-packed argument array, and
next to the installed peers (cuda.core, cuda.bindings, CuPy, PyTorch, Triton,
ctypes); allocation, copy bandwidth and staged copies likewise. Absolute times differ
between machines (and VM instances) by a third: only the ratios to raw C within one
run mean anything. Method: barecuda/bench/harness.py.

Files
-----
``harness.py``      one clock (``now_ns``), rows, timing loops, alternated rounds, ratios
``context.py``      the kernels, buffers and streams of a run (``Context``), ``Settings``
``launch_rows.py``  sections ``launch``, ``threads``, ``alloccheck``
``memory_rows.py``  sections ``alloc``, ``copy``, ``smallcopy``, ``staging``
``peers.py``        the peers' rows; ``installed_versions`` (metadata only)
``report.py``       ``Section``, the table, the JSON document, the baseline comparison
``_baseline.pyx``   raw C loops and the clock (include/barecuda/bc_baseline.h, bc_clock.h)
``staging_sweep.py`` a developer's probe of the staging parameters (``python -m barecuda.bench.staging_sweep``)

Adding rows
-----------
Put a module named ``<something>_rows.py`` in this package (``graph_rows.py``,
``compile_rows.py``, ``dist_rows.py``...). It is found by its name; nothing else is
registered anywhere. It defines::

    ORDER = 30                       # optional: where its sections go (launch 10, memory 20; default 50)
    SECTIONS = {"graph": graph_section}          # --rows name -> function
    ALIASES = {"graphs": ("graph",)}             # optional: extra --rows words

    def graph_section(ctx):          # ctx: barecuda.bench.Context (ctx.bc, ctx.B, ctx.settings, ...)
        rows = [...]                 # harness.c_row / harness.py_row / Row objects
        run_rounds(rows, ctx.settings.rounds, ctx.settings.batches, 0, ctx.settings.rt_n, ctx.B.ctx_sync)
        return Section.of_issue("graph", "graph launch (ns)", [("issue", 8), ("x", 6)], rows, ratios(rows))

Every section runs by default and by name (``--rows graph``); one that raises is
reported as ``STAGE FAILED`` and the others still run. Rows whose JSON has ``key``
and ``ratio`` can be added to bench/baseline.json (``--update-baseline``) and are then
checked by tools/gpu-check.sh. ``pytest bench/`` can measure a section's rows with
pytest-benchmark: see bench/conftest.py.
"""
import importlib
import pkgutil

from barecuda.bench.context import Context, Settings
from barecuda.bench.harness import (BATCH, NotAvailable, Row, c_row, check_once, compile_loops, now_ns, py_row,
                                    ratios, run_rounds, why)
from barecuda.bench.peers import installed_versions
from barecuda.bench.report import Section, environment

__all__ = ["BATCH", "Context", "NotAvailable", "Row", "Section", "Settings", "c_row", "check_once",
           "compile_loops", "environment", "installed_versions", "now_ns", "py_row", "quick_launch_overhead",
           "ratios", "row_modules", "run", "run_rounds", "section_names", "why", "main"]


def row_modules():
    """The rows modules of this package (every ``*_rows`` module), in ``ORDER``.

    Returns a list of ``(name, module or the exception importing it raised)``.
    """
    out = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.endswith("_rows"):
            continue
        try:
            out.append((info.name, importlib.import_module(f"{__name__}.{info.name}")))
        except Exception as e:   # noqa: BLE001 -- a broken rows module fails its stage, not the run
            out.append((info.name, e))
    return sorted(out, key=lambda nm: (getattr(nm[1], "ORDER", 50), nm[0]))


def section_names():
    """``(names, aliases)``: every ``--rows`` name in table order, and the aliases."""
    names, aliases = [], {}
    for _, mod in row_modules():
        if isinstance(mod, Exception):
            continue
        names.extend(getattr(mod, "SECTIONS", {}))
        aliases.update(getattr(mod, "ALIASES", {}))
    return names, aliases


def run(rows=None, settings=None, ctx=None):
    """Measure sections; the API behind ``python -m barecuda.bench``.

    Parameters
    ----------
    rows : iterable of str, optional
        ``--rows`` names or aliases (default: every section).
    settings : Settings, optional
    ctx : Context, optional
        Reused when given (and then not closed); else made and closed here.

    Returns
    -------
    (env, sections, failures)
        The environment dict, the list of ``Section``, and ``{stage: reason}`` of the
        sections (or rows modules) that raised.
    """
    settings = settings or Settings()
    env = environment()
    failures = {}
    want = None
    if rows is not None:
        _, aliases = section_names()
        want = set()
        for w in rows:
            want.update(aliases.get(w, (w,)))
    plan = []
    for name, mod in row_modules():
        if isinstance(mod, Exception):
            failures[name] = why(mod)
            continue
        for sec_name, fn in getattr(mod, "SECTIONS", {}).items():
            if want is None or sec_name in want:
                plan.append((sec_name, fn))
    own = ctx is None
    if own:
        ctx = Context(settings)
    ctx.settings = settings
    sections = []
    t0 = now_ns()
    try:
        for sec_name, fn in plan:
            try:
                sections.append(fn(ctx))
            except Exception as e:   # noqa: BLE001 -- a section that breaks is reported; the others run
                import traceback
                traceback.print_exc()
                failures[sec_name] = why(e)
                try:
                    ctx.B.ctx_sync()
                except Exception:   # noqa: BLE001
                    pass
    finally:
        env.update(ctx.extra)
        env["barecuda_setup_error"] = ctx.bc_error
        if own:
            ctx.close()
    from barecuda.bench.peers import versions
    env["peers"] = dict(versions)
    env["elapsed_s"] = round((now_ns() - t0) * 1e-9, 1)
    env["stage_errors"] = failures
    return env, sections, failures


def quick_launch_overhead(rounds=9):
    """``(barecuda kernel.launch ns, raw C ns, ratio)`` per launch of a 4-argument
    kernel, medians of alternated rounds; under a second on a GPU (the doctor's line)."""
    from barecuda.bench.launch_rows import quick_launch_overhead as q
    ctx = Context()
    try:
        return q(ctx, rounds)
    finally:
        ctx.close()


def main(argv=None):
    """``python -m barecuda.bench``: see ``python -m barecuda.bench --help``."""
    from barecuda.bench.__main__ import main as _main
    return _main(argv)
