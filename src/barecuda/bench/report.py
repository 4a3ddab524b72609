"""The benchmark's output: sections, the text table, the JSON document, the baseline.

Owns: ``Section`` (what every rows module's section function returns), the text
table (``format_table``), the JSON document (``document``: every figure and the
environment, one key per section), the environment block (``environment``), and the
comparison with a stored baseline of ratios to raw C (``compare_baseline``,
``updated_baseline``; the file is bench/baseline.json, read by tools/gpu-check.sh).
"""
import datetime
import json
import os
import platform
import sys

__all__ = ["Section", "format_table", "document", "environment", "load_baseline", "compare_baseline",
           "format_baseline", "updated_baseline", "fmt_ns", "fmt_x", "WIDTH"]

WIDTH = 52      # label column
RULE = 100


def fmt_ns(v):
    """A time in ns for a table cell ("-" when not measured)."""
    return "-" if v is None else f"{v:,.0f}"


def fmt_x(v):
    """A ratio for a table cell ("-" when not measured)."""
    return "-" if v is None else f"{v:.3f}"


class Section:
    """One table of the report, and its figures for the JSON document.

    Parameters
    ----------
    key : str
        The JSON key of ``data`` (e.g. ``"launch"``); also the ``--rows`` name.
    title : str
        Header of the label column.
    columns : sequence of (name, width)
        Headers of the value columns.
    lines : list
        ``(label, cells)`` with one string per column, or ``(label, "n/a (reason)")``.
    notes : sequence of str
        Lines printed under the table.
    data : JSON-able
        The figures, as written to ``--json``. Rows with ``"key"`` and ``"ratio"``
        (``{column: ratio to raw C}``) take part in the baseline comparison.
    """

    def __init__(self, key, title, columns=(), lines=None, notes=(), data=None):
        self.key, self.title, self.columns = key, title, list(columns)
        self.lines = lines if lines is not None else []
        self.notes = list(notes)
        self.data = data

    def add(self, label, cells):
        self.lines.append((label, cells))

    @classmethod
    def of_issue(cls, key, title, columns, rows, rat):
        """A section of one issue cost and its ratio per row (``rat``: ``harness.ratios(rows)``),
        a row that could not run shown as ``n/a (reason)``."""
        sec = cls(key, title, columns, data=[r.as_json(rat) for r in rows])
        for r in rows:
            sec.add(r.label, f"n/a ({r.na})" if r.na else [fmt_ns(r.result()["issue"]), fmt_x(rat[r.key]["issue"])])
        return sec

    def format(self):
        out = ["-" * RULE, f"{self.title:<{WIDTH}} " + " ".join(f"{n:>{w}}" for n, w in self.columns)]
        for label, cells in self.lines:
            if isinstance(cells, str):
                out.append(f"{label:<{WIDTH}} {cells}"[:160])
            else:
                out.append(f"{label:<{WIDTH}} " + " ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, self.columns)))
        out.extend("  " + n for n in self.notes)
        return out


def format_table(env, sections, settings, failures=None):
    """The text table of a run: a header naming the machine, then each section."""
    gpu = env.get("gpu", "?")
    out = ["=" * RULE,
           f"barecuda {env.get('barecuda', '?')} benchmark -- {gpu} (cc {env.get('compute_capability', '?')}), "
           f"driver CUDA {env.get('driver_version', '?')}, Python {env['python']}",
           f"CPU: {env['cpu']}; rounds: {settings.rounds} (alternated); x = ratio to the raw C row of the same run"]
    if env.get("driver_override"):
        out.append(f"NOTE: the driver is {env['driver_override']} (BARECUDA_LIBCUDA), not the system's "
                   "libcuda: the figures are of that library.")
    for s in sections:
        out.extend(s.format())
    out.append("=" * RULE)
    for k, v in (failures or {}).items():
        out.append(f"STAGE FAILED: {k}: {v}")
    return "\n".join(out)


def document(env, sections, settings):
    """The ``--json`` document: ``env``, ``settings`` and one key per section."""
    doc = {"env": env, "settings": settings.as_dict()}
    for s in sections:
        doc[s.key] = s.data
    return doc


# ------------------------------------------------------------------ environment
def environment():
    """Python, platform, CPU, driver and GPU, installed peers (by package metadata)."""
    from barecuda.bench.peers import installed_versions
    env = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "clock": "CLOCK_MONOTONIC" if sys.platform != "win32" else "QueryPerformanceCounter",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }
    try:
        import barecuda as bc
        env["barecuda"] = bc.__version__
        env["driver_path"] = bc.driver_path()
        env["driver_override"] = os.environ.get("BARECUDA_LIBCUDA") or None
        env["driver_version"] = "%d.%d" % bc.driver_version()
        d = bc.Device(0)
        env["gpu"] = d.name
        env["compute_capability"] = "%d.%d" % d.compute_capability
        env["gpu_count"] = bc.device_count()
    except Exception as e:   # noqa: BLE001
        from barecuda.bench.harness import why
        env["driver_error"] = why(e)
    env["installed"] = installed_versions()
    return env


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ------------------------------------------------------------------ baseline
def load_baseline(path):
    """The stored baseline: ``{"tolerance": 0.05, "rows": {key: {"column", "ratio", "label"}}}``."""
    with open(path) as fh:
        base = json.load(fh)
    if not isinstance(base.get("rows"), dict):
        raise ValueError(f"{path}: no 'rows' table")
    return base


def _measured(doc):
    """``{key: row}`` of every row in the document that carries ratios (a ``{column:
    ratio}`` dict, or one ratio: the graph rows')."""
    out = {}
    for v in doc.values():
        if isinstance(v, list):
            for r in v:
                if isinstance(r, dict) and "key" in r and isinstance(r.get("ratio"), (dict, int, float)):
                    out[r["key"]] = r
    return out


def _ratio(rows, key, column):
    """The ratio to raw C of row `key` in `column` (rows with one ratio have no columns)."""
    r = rows.get(key)
    x = r.get("ratio") if r else None
    return x.get(column) if isinstance(x, dict) else x


def _checked(rows, b):
    """The figure a baseline row checks: the row's ratio to raw C, or, for a row with a
    ``floor``, its ratio to that floor row of the same run (both against the same raw C
    row), so that what the floor itself costs on a machine cannot turn the check red."""
    col = b.get("column", "issue")
    got = _ratio(rows, b["key"], col)
    if got is None or not b.get("floor"):
        return got
    floor = _ratio(rows, b["floor"], col)
    return got / floor if floor else None


def _row_tolerance(base, b):
    return float(b.get("tolerance", base.get("tolerance", 0.05)))


def compare_baseline(doc, base):
    """Compare a run's ratios with the baseline's.

    Returns a list of ``(key, label, measured, baseline, status)``; status is
    ``"pass"``, ``"FAIL"`` (the ratio to raw C -- or, for a row with a ``floor``, to
    that floor row of the same run -- grew by more than the tolerance: the row's
    ``tolerance``, else the file's, else 5%), ``"n/a"`` (the row was not
    measured) or ``"skip"`` (not measured, and the row ``needs`` something this
    machine lacks: a peer library such as torch with CUDA, or CuPy).
    """
    rows = _measured(doc)
    out = []
    for key, b in base["rows"].items():
        r = rows.get(key)
        got = _checked(rows, dict(b, key=key))
        label = b.get("label") or (r or {}).get("label") or key
        if got is None:
            out.append((key, label, None, b["ratio"], "skip" if b.get("needs") else "n/a"))
        else:
            tol = _row_tolerance(base, b)
            out.append((key, label, got, b["ratio"], "FAIL" if got > b["ratio"] * (1 + tol) else "pass"))
    return out


def format_baseline(results, base, path):
    """The baseline section of the table, and one summary line (``baseline: ...``)."""
    tol = float(base.get("tolerance", 0.05))
    s = Section("baseline", f"baseline ({os.path.basename(path)}, ratio to raw C)",
                [("now", 7), ("stored", 7), ("limit", 7), ("result", 7)])
    for key, label, got, ref, st in results:
        lim = ref * (1 + _row_tolerance(base, base["rows"].get(key, {})))
        if st == "skip":
            st = f"skip (needs {base['rows'][key]['needs']})"
        s.add(label, [fmt_x(got), fmt_x(ref), fmt_x(lim), st])
    bad = [f"{k} {g:.3f} vs {r:.3f}" for k, _, g, r, st in results if st == "FAIL"]
    missing = [k for k, _, _, _, st in results if st == "n/a"]
    skipped = [k for k, _, _, _, st in results if st == "skip"]
    summary = (f"baseline: {len(results) - len(bad) - len(missing) - len(skipped)} pass, {len(bad)} regressed "
               f"> {tol:.0%}" + (": " + "; ".join(bad) if bad else "")
               + (f", {len(missing)} not measured ({', '.join(missing)})" if missing else "")
               + (f", {len(skipped)} skipped ({', '.join(f'{k}: needs ' + base['rows'][k]['needs'] for k in skipped)})"
                  if skipped else ""))
    s.notes.append(summary)
    return s, summary


def updated_baseline(doc, base=None):
    """A new baseline from a run: the rows (and columns) of ``base``, or every launch
    row with a reference, with this run's ratios."""
    rows = _measured(doc)
    keys = dict(base["rows"]) if base else {r["key"]: {"column": "issue"} for r in rows.values() if r.get("ref")}
    out = {"about": (base or {}).get("about", "Ratios to raw C of the launch rows (python -m barecuda.bench); "
                                              "tools/gpu-check.sh flags a ratio more than `tolerance` above."),
           "tolerance": (base or {}).get("tolerance", 0.05),
           "source": {"date_utc": doc.get("env", {}).get("date_utc"), "gpu": doc.get("env", {}).get("gpu"),
                      "driver": doc.get("env", {}).get("driver_version")},
           "rows": {}}
    for key, b in keys.items():
        col = b.get("column", "issue")
        r = rows.get(key)
        got = _checked(rows, dict(b, key=key))
        if got is None:
            if "ratio" in b:
                out["rows"][key] = dict(b)          # not measured this time: keep the stored figure
            continue
        out["rows"][key] = {"column": col, "ratio": round(got, 3), "label": (r or {}).get("label", b.get("label"))}
        out["rows"][key].update({k: b[k] for k in ("needs", "tolerance", "floor") if k in b})
    return out
