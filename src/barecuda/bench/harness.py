"""Timing harness of the benchmark wing: one clock, alternated rounds, medians.

Owns: the clock (``now_ns``, the C ``bc_now_ns`` of include/barecuda/bc_clock.h that
the staging pipeline and the raw C loops of ``_baseline`` read too), the ``Row``
record every table line is, the two row makers (``c_row`` for a raw C loop,
``py_row`` for a Python statement), the timing loops a Python statement is compiled
into, ``run_rounds`` (rows alternated round by round, medians of many repetitions)
and ``ratios`` (median of per-round ratios to a reference row).

Method
------
* A Python row is the statement a user would write, compiled into a loop the way
  ``timeit`` does it (the names it uses become local variables), so the figure
  includes the interpreter's cost of making the call and nothing else.
* Columns: *issue* -- CPU cost per asynchronous launch, median over batches of
  ``BATCH`` launches (the sync after each batch is not timed); *thr* -- N launches
  then one sync, per launch; *rt* -- one launch + stream synchronize.
* Rows are alternated (round 1: A B C ..., round 2: A B C ...) so that drift of the
  machine hits every row alike; figures are medians across rounds, ratios the
  median of the per-round ratios.
"""
import statistics
import sys
from itertools import repeat

from barecuda.bench._baseline import now_ns

__all__ = ["BATCH", "NotAvailable", "Row", "c_row", "py_row", "compile_loops", "check_once", "run_rounds",
           "ratios", "median", "now_ns", "say", "why", "timed_to_sync"]

BATCH = 100           # launches per timed batch (well below the ~2,250-deep launch queue)


class NotAvailable(Exception):
    """A row cannot run; the message is the reason shown in the table."""


def median(xs):
    """The median of ``xs``, or None when empty."""
    return statistics.median(xs) if xs else None


def round_ratio(a, b):
    """The median over rounds of ``a[i] / b[i]`` (two rows' samples, round i of each
    measured close in time), or None when no round has both."""
    n = min(len(a), len(b))
    return median([x / y for x, y in zip(a[:n], b[:n]) if y])


def say(msg):
    """Progress to stderr (the table goes to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def why(exc):
    """One line naming an exception, for an n/a cell."""
    if isinstance(exc, NotAvailable):
        return str(exc)
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:110]


def timed_to_sync(B, fn):
    """A callable that runs ``fn()`` and returns the ns up to a context synchronize
    (``B`` is the ``_baseline`` module: its clock and its ``ctx_sync``)."""
    def once():
        t0 = now_ns()
        fn()
        B.ctx_sync()
        return now_ns() - t0
    return once


# The loops one statement is compiled into. As in ``timeit``, the statement's names
# are parameters of the generated functions (locals), and the source is compiled
# once per row: this is code generation for timing, not probing of an API.
_TEMPLATE = """
def _issue(_nb, _execs{sep}{args}):
    _clock = _clock_g
    _out = []
    for _ in _repeat(None, _nb):
        _t0 = _clock()
        for _ in _repeat(None, _execs):
            {stmt}
        _t1 = _clock()
        {sync}
        _out.append(_t1 - _t0)
    return _out

def _thr(_execs{sep}{args}):
    _clock = _clock_g
    _t0 = _clock()
    for _ in _repeat(None, _execs):
        {stmt}
    {sync}
    return _clock() - _t0

def _rt(_n{sep}{args}):
    _clock = _clock_g
    _out = []
    for _ in _repeat(None, _n):
        _t0 = _clock()
        {stmt}
        {sync}
        _out.append(_clock() - _t0)
    return _out

def _run(_execs{sep}{args}):
    for _ in _repeat(None, _execs):
        {stmt}

def _sync({args}):
    {sync}

def _chunks(_reps, _chunk{sep}{args}):
    for _ in _repeat(None, _reps):
        for _ in _repeat(None, _chunk):
            {stmt}
        {sync}
"""


def compile_loops(stmt, ns, sync="pass"):
    """Compile the timing loops for one Python statement.

    Parameters
    ----------
    stmt : str
        The statement timed, e.g. ``"k.launch(1, 1, o, i, 7, 1.5, stream=s)"``.
    ns : dict
        The names ``stmt`` and ``sync`` use; they become local variables of the loops.
    sync : str
        The statement run after each batch (not timed in ``issue``).

    Returns
    -------
    dict
        Callables ``issue(nb, execs)`` (ns of each batch), ``thr(execs)`` (total ns),
        ``rt(n)`` (ns of each statement + sync), ``run(execs)``, ``sync()``,
        ``chunks(reps, chunk)``.
    """
    names = sorted(ns)
    src = _TEMPLATE.format(args=", ".join(names), sep=", " if names else "", stmt=stmt, sync=sync)
    g = {"_clock_g": now_ns, "_repeat": repeat}
    exec(compile(src, f"<bench: {stmt}>", "exec"), g)   # noqa: S102 -- timeit's method, see above
    return {k: _bind(g["_" + k], ns) for k in ("issue", "thr", "rt", "run", "sync", "chunks")}


def _bind(f, ns):
    return lambda *a: f(*a, **ns)   # one call per loop, not per iteration


class Row:
    """One line of a timed table.

    ``issue(nb, bs)`` -> per-launch ns of each batch; ``thr(n)`` -> per-launch ns;
    ``rt(n)`` -> list of round-trip ns; ``run(n)`` runs n times; ``sync()`` waits.
    Any may be None. ``ref`` names the row this one is a ratio to; ``per`` is the
    number of launches one execution of the statement makes (a batched row).
    ``setup``/``teardown`` (optional) run around each round of this row.
    """

    def __init__(self, key, label, ref=None, section="launch", per=1, note=""):
        self.key, self.label, self.ref, self.section, self.per, self.note = key, label, ref, section, per, note
        self.issue = self.thr = self.rt = self.run = self.sync = None
        self.setup = self.teardown = None
        self.na = None
        self.stmt = None
        self.samples = {"issue": [], "thr": [], "rt": []}

    def mark_na(self, reason):
        """The row cannot run: it stays in the table with ``reason``."""
        self.na = reason
        self.issue = self.thr = self.rt = self.run = None

    def result(self):
        """Median of each column's samples (None where not measured)."""
        return {k: median(v) for k, v in self.samples.items()}

    def as_json(self, rat):
        return {"key": self.key, "label": self.label, "ref": self.ref, "stmt": self.stmt, "na": self.na,
                "per": self.per, "median_ns": self.result(), "ratio": rat.get(self.key), "samples_ns": self.samples}


def na_row(key, label, ref, reason, section="launch"):
    """A row that cannot run, with the reason shown in the table."""
    r = Row(key, label, ref, section=section)
    r.mark_na(reason)
    return r


def c_row(B, key, label, fn, grid, block, params, stream, ref=None, ex=None, note=""):
    """A raw C launch row: ``_baseline``'s loops around ``cuLaunchKernel`` (``ex``: the
    attributes of ``cuLaunchKernelEx``) with a pre-packed parameter block."""
    r = Row(key, label, ref, note=note)
    r.stmt = f"C loop: {'cuLaunchKernelEx' if ex else 'cuLaunchKernel'} with a pre-packed void**"
    r.issue = lambda nb, bs: [t / bs for t in B.launch_batches(fn, grid, block, params, stream, nb, bs, ex=ex)]
    r.thr = lambda n: B.launch_throughput(fn, grid, block, params, stream, n, ex=ex) / n
    r.rt = lambda n: B.launch_roundtrip(fn, grid, block, params, stream, n, ex=ex)
    r.run = lambda n: B.launch_loop(fn, grid, block, params, stream, n, ex=ex)
    r.sync = lambda: B.stream_sync(stream)
    return r


def py_row(key, label, stmt, ns, sync, ref=None, per=1, roundtrip=True, note="", section="launch"):
    """A Python row: ``stmt`` (with the names in ``ns``) timed by compiled loops."""
    r = Row(key, label, ref, section=section, per=per, note=note)
    r.stmt = stmt
    loops = compile_loops(stmt, ns, sync)
    r.issue = lambda nb, bs: [t / (max(1, bs // per) * per) for t in loops["issue"](nb, max(1, bs // per))]
    r.thr = lambda n: loops["thr"](max(1, n // per)) / (max(1, n // per) * per)
    r.rt = loops["rt"] if roundtrip else None
    r.run = lambda n: loops["run"](max(1, n // per))
    r.sync = loops["sync"]
    return r


def check_once(row, sync_fn=None):
    """Run a row once (warm-up: JIT, caches); on failure the row becomes n/a."""
    if row.na:
        return
    try:
        if row.run is not None:
            row.run(BATCH)
        if sync_fn is not None:
            sync_fn()
    except Exception as e:   # noqa: BLE001 -- a row that cannot run is reported, not fatal
        row.mark_na(why(e))


def run_rounds(rows, rounds, batches, thr_n, rt_n, sync_all, label="launch"):
    """Measure ``rows`` alternated over ``rounds``: each round runs every live row's
    issue (``batches`` x ``BATCH``), throughput (``thr_n``) and round trip (``rt_n``)
    columns once. A row that fails becomes n/a; the others go on."""
    live = [r for r in rows if not r.na]
    for r in live:
        check_once(r, sync_all)
    live = [r for r in live if not r.na]
    t_start = now_ns()
    for rnd in range(rounds):
        for r in live:
            if r.na:
                continue
            try:
                if r.setup:
                    r.setup()
                try:
                    if r.issue:
                        r.samples["issue"].append(median(r.issue(batches, BATCH)))
                    if r.thr and thr_n:
                        r.samples["thr"].append(r.thr(thr_n))
                    if r.rt and rt_n:
                        r.samples["rt"].append(median(r.rt(rt_n)))
                finally:
                    if r.teardown:
                        r.teardown()
            except Exception as e:   # noqa: BLE001
                r.mark_na("failed in round %d: %s" % (rnd + 1, why(e)))
                try:
                    sync_all()
                except Exception:   # noqa: BLE001
                    pass
        if rnd == 0 and label:
            est = (now_ns() - t_start) * 1e-9 * rounds
            say(f"  {label}: round 1/{rounds} done, ~{est:.0f} s for all rounds")
    return rows


def ratios(rows):
    """Per-column ratio of each row to its reference row: the median over rounds of
    the per-round ratio (pairs measured close in time). ``{key: {col: ratio}}``."""
    by_key = {r.key: r for r in rows}
    out = {}
    for r in rows:
        ref = by_key.get(r.ref) if r.ref else None
        res = {}
        for col in ("issue", "thr", "rt"):
            a = r.samples[col]
            b = ref.samples[col] if ref is not None else []
            if r.na or not a or not b or (ref is not None and ref.na):
                res[col] = None
                continue
            res[col] = round_ratio(a, b)
        out[r.key] = res
    return out
