"""The benchmark wing (src/barecuda/bench/) on the driver double: its clock, the raw
copy measurement, the rows-module registry, the baseline comparison and the command
line. Nothing here asserts a speed (the double's timings mean nothing)."""
import json
import os
import subprocess
import sys
import time

import pytest

import barecuda.bench as bench
from barecuda import _staging as st
from barecuda.bench import _baseline, report
from _helpers import REPO

CHUNK = 4096


def _env():
    # conftest puts the barecuda this session imported (installed or built in place) first
    # on PYTHONPATH; forcing src/ here would pick an unbuilt tree when the package is installed
    return dict(os.environ)


def test_one_clock_is_clock_monotonic():
    """The C clock (bc_clock.h) and Python's monotonic_ns read the same clock on
    POSIX: their readings agree to well under a millisecond, and both advance by a
    sleep."""
    if sys.platform == "win32":
        pytest.skip("QueryPerformanceCounter: no Python twin to compare with")
    a, c0, b = time.monotonic_ns(), bench.now_ns(), time.monotonic_ns()
    assert a - 1000 <= c0 <= b + 1000
    time.sleep(0.02)
    c1 = bench.now_ns()
    assert c1 - c0 >= 19_000_000
    assert bench.now_ns is _baseline.now_ns


@pytest.fixture
def small_chunks(fake):
    saved = st.configure()
    st.configure(chunk_bytes=CHUNK, chunks=3, threads=3, threshold=0, min_piece=1, min_part=1)
    yield
    st.release()
    st.configure(**saved)


def test_bench_copy_goes_through_the_stager(fake, small_chunks):
    before = st.stats()
    for direction in ("htod", "dtoh"):
        r = _baseline.bench_copy(direction, 5 * CHUNK + 3, 3)
        assert len(r) == 3 and all(x > 0 for x in r)
    after = st.stats()
    # 4 staged copies each way (1 warm-up + 3 timed) went through staged_htod / staged_dtoh
    staged = [k for k in after if k.endswith("_staged") and not k.endswith("bytes")]
    assert staged and sum(after[k] - before.get(k, 0) for k in staged) >= 8
    with pytest.raises(ValueError):
        _baseline.bench_copy("sideways", 10, 1)
    with pytest.raises(ValueError):
        _baseline.bench_copy("htod", 0, 1)


def test_staging_no_longer_exports_bench_copy():
    assert not hasattr(st, "bench_copy")


def test_registry_finds_rows_modules_by_name(tmp_path, monkeypatch):
    """A ``*_rows.py`` module dropped into the package is picked up with its
    SECTIONS, ORDER and ALIASES; other modules are not."""
    (tmp_path / "zz_test_rows.py").write_text(
        "ORDER = 15\n"
        "from barecuda.bench.report import Section\n"
        "def extra(ctx):\n"
        "    return Section('extra', 'extra rows', [('v', 4)], lines=[('one', ['1'])], data=[])\n"
        "SECTIONS = {'extra': extra}\n"
        "ALIASES = {'more': ('extra',)}\n")
    (tmp_path / "helper.py").write_text("SECTIONS = {'nope': None}\n")
    (tmp_path / "broken_rows.py").write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.setattr(bench, "__path__", list(bench.__path__) + [str(tmp_path)])
    try:
        mods = dict(bench.row_modules())
        assert "zz_test_rows" in mods and "helper" not in mods
        assert isinstance(mods["broken_rows"], RuntimeError)
        names, aliases = bench.section_names()
        assert names.index("launch") < names.index("extra") < names.index("alloc")
        assert "nope" not in names and aliases["more"] == ("extra",)
    finally:
        for m in ("zz_test_rows", "broken_rows"):
            sys.modules.pop("barecuda.bench." + m, None)


def test_run_reports_a_failing_section_and_runs_the_others(fake, tmp_path, monkeypatch):
    (tmp_path / "zz_fail_rows.py").write_text(
        "def boom(ctx):\n    raise ValueError('section broke')\n"
        "SECTIONS = {'boom': boom}\n")
    monkeypatch.setattr(bench, "__path__", list(bench.__path__) + [str(tmp_path)])
    try:
        env, sections, failures = bench.run(["boom", "alloc"], bench.Settings(quick=True, rounds=1, peers=False))
    finally:
        sys.modules.pop("barecuda.bench.zz_fail_rows", None)
    assert failures == {"boom": "ValueError: section broke"}
    assert [s.key for s in sections] == ["alloc"]
    keys = [r["key"] for r in sections[0].data]
    assert keys[:4] == ["rawalloc", "rawasync", "bcempty", "bcalloc"]
    assert env["stage_errors"] == failures


def _doc(ratios):
    return {"env": {}, "launch": [{"key": k, "label": k, "ref": "raw4", "ratio": {"issue": v}}
                                  for k, v in ratios.items()]}


def test_baseline_flags_more_than_five_percent():
    base = {"tolerance": 0.05, "rows": {"bc4": {"column": "issue", "ratio": 1.09},
                                        "plan4": {"column": "issue", "ratio": 1.03},
                                        "all4": {"column": "issue", "ratio": 1.00}}}
    got = {r[0]: r for r in report.compare_baseline(_doc({"bc4": 1.09 * 1.049, "plan4": 1.03 * 1.051}), base)}
    assert got["bc4"][4] == "pass"
    assert got["plan4"][4] == "FAIL"
    assert got["all4"][4] == "n/a" and got["all4"][2] is None
    sec, summary = report.format_baseline(list(got.values()), base, "baseline.json")
    assert "1 regressed" in summary and "plan4" in summary and "all4" in summary
    assert any(cells[-1] == "FAIL" for _, cells in sec.lines)


def test_baseline_checks_a_row_against_its_floor_row():
    """A row with a ``floor`` is checked as its ratio to that floor row of the same run
    (both against the same raw C row): a machine whose floor is high stays green, a
    regression of barecuda's own share turns it red. Graph rows carry one ratio."""
    base = {"tolerance": 0.05, "rows": {
        "torch4p": {"column": "issue", "floor": "floortorch4p", "ratio": 1.08, "tolerance": 0},
        "bc_setarg": {"column": "issue", "floor": "floor_setone", "ratio": 1.10, "tolerance": 0}}}
    doc = _doc({"torch4p": 1.24, "floortorch4p": 1.16})
    doc["graph"] = [{"key": "bc_setarg", "ratio": 1.50}, {"key": "floor_setone", "ratio": 1.40}]
    got = {r[0]: r for r in report.compare_baseline(doc, base)}
    assert got["torch4p"][4] == "pass" and got["torch4p"][2] == pytest.approx(1.24 / 1.16)
    assert got["bc_setarg"][4] == "pass" and got["bc_setarg"][2] == pytest.approx(1.5 / 1.4)
    doc = _doc({"torch4p": 1.30, "floortorch4p": 1.16})
    doc["graph"] = [{"key": "bc_setarg", "ratio": 1.60}, {"key": "floor_setone", "ratio": 1.40}]
    got = {r[0]: r[4] for r in report.compare_baseline(doc, base)}
    assert got == {"torch4p": "FAIL", "bc_setarg": "FAIL"}
    got = {r[0]: r[4] for r in report.compare_baseline(_doc({"torch4p": 1.2}), base)}   # no floor measured
    assert got == {"torch4p": "n/a", "bc_setarg": "n/a"}
    new = report.updated_baseline(_doc({"torch4p": 1.2, "floortorch4p": 1.15}), base)
    assert new["rows"]["torch4p"]["floor"] == "floortorch4p"
    assert new["rows"]["torch4p"]["ratio"] == round(1.2 / 1.15, 3)


def test_the_stored_baseline_checks_tensor_rows_against_their_floor():
    """bench/baseline.json: torch tensors <= 1.08x their floor, node.set_arg <= 1.10x its."""
    base = report.load_baseline(os.path.join(REPO, "bench", "baseline.json"))
    assert base["rows"]["torch4p"]["floor"] == "floortorch4p" and base["rows"]["torch4p"]["ratio"] == 1.08
    assert base["rows"]["bc_setarg"]["floor"] == "floor_setone" and base["rows"]["bc_setarg"]["ratio"] == 1.10


def test_baseline_skips_a_missing_peer_row_and_honours_row_tolerance():
    base = {"tolerance": 0.05, "rows": {
        "bc4": {"column": "issue", "ratio": 1.09},
        "torch4p": {"column": "issue", "ratio": 1.15, "tolerance": 0, "needs": "torch with CUDA"},
        "cupy4p": {"column": "issue", "ratio": 1.15, "tolerance": 0, "needs": "CuPy"}}}
    got = {r[0]: r for r in report.compare_baseline(_doc({"bc4": 1.09, "cupy4p": 1.16}), base)}
    assert got["torch4p"][4] == "skip" and got["torch4p"][2] is None
    assert got["cupy4p"][4] == "FAIL"              # 1.16 > 1.15 x (1 + 0): the row's own tolerance
    assert got["bc4"][4] == "pass"
    sec, summary = report.format_baseline(list(got.values()), base, "baseline.json")
    assert "1 pass, 1 regressed" in summary and "1 skipped (torch4p: needs torch with CUDA)" in summary
    assert "not measured" not in summary
    assert any(cells[-1] == "skip (needs torch with CUDA)" for _, cells in sec.lines)
    got = {r[0]: r[4] for r in report.compare_baseline(_doc({"bc4": 1.09, "cupy4p": 1.149}), base)}
    assert got["cupy4p"] == "pass"
    new = report.updated_baseline(_doc({"bc4": 1.08, "cupy4p": 1.1}), base)
    assert new["rows"]["cupy4p"] == {"column": "issue", "ratio": 1.1, "label": "cupy4p", "needs": "CuPy",
                                     "tolerance": 0}
    assert new["rows"]["torch4p"]["needs"] == "torch with CUDA"      # unmeasured: kept as stored


def test_updated_baseline_keeps_rows_and_unmeasured_figures():
    base = {"about": "x", "tolerance": 0.05, "rows": {"bc4": {"column": "issue", "ratio": 1.09},
                                                      "all4": {"column": "issue", "ratio": 1.0}}}
    new = report.updated_baseline(_doc({"bc4": 1.0712, "other": 2.0}), base)
    assert new["rows"]["bc4"]["ratio"] == 1.071
    assert new["rows"]["all4"]["ratio"] == 1.0
    assert "other" not in new["rows"] and new["tolerance"] == 0.05


def test_stored_baseline_file_is_valid():
    base = report.load_baseline(os.path.join(REPO, "bench", "baseline.json"))
    assert {"bc0", "bc4", "bc16", "plan4", "all4", "plist4"} <= set(base["rows"])
    for row in base["rows"].values():
        assert row["column"] == "issue" and 0.9 < row["ratio"] < 1.5


def test_command_line_json_and_baseline(fake_lib_path, tmp_path):
    """``python -m barecuda.bench`` on the double: same flags as before, a JSON
    document with the launch rows and their ratios, a baseline column, a rewritten
    baseline."""
    out = tmp_path / "b.json"
    newbase = tmp_path / "base.json"
    env = dict(_env(), BARECUDA_LIBCUDA=fake_lib_path)
    p = subprocess.run([sys.executable, "-m", "barecuda.bench", "--quick", "--rounds", "2", "--rows", "launch",
                        "--no-peers", "--json", str(out), "--baseline", os.path.join(REPO, "bench", "baseline.json"),
                        "--update-baseline", str(newbase)],
                       capture_output=True, text=True, env=env, timeout=240)
    assert "STAGE FAILED" not in p.stdout, p.stdout + p.stderr
    assert "(BARECUDA_LIBCUDA), not the system's libcuda" in p.stdout   # says whose figures they are
    assert "baseline (baseline.json, ratio to raw C)" in p.stdout
    assert p.stdout.rstrip().splitlines()[-1].startswith("baseline: ")
    doc = json.loads(out.read_text())
    rows = {r["key"]: r for r in doc["launch"]}
    assert {"raw0", "raw4", "raw16", "rawex4", "bc4", "plan4", "plist4"} <= set(rows)
    assert rows["bc4"]["ref"] == "raw4" and rows["bc4"]["ratio"]["issue"] > 0
    assert not any(k in rows for k in ("cupy", "torch"))          # --no-peers
    # the tensors-on-the-fast-path rows stand beside bc4: DeviceBuffers measured, peers n/a
    keys = [r["key"] for r in doc["launch"]]
    assert keys[keys.index("bc4") + 1:keys.index("bc4") + 4] == ["bc4p", "torch4p", "cupy4p"]
    assert rows["bc4p"]["ref"] == "raw4p" and rows["bc4p"]["ratio"]["issue"] > 0 and rows["raw4p"]["na"] is None
    assert "--no-peers" in rows["torch4p"]["na"] and "--no-peers" in rows["cupy4p"]["na"]
    res = {r[0]: r[4] for r in doc["baseline"]["results"]}
    assert res.get("torch4p", "skip") == "skip" and res.get("cupy4p", "skip") == "skip"
    assert doc["settings"]["rounds"] == 2 and "baseline" in doc
    new = json.loads(newbase.read_text())
    assert set(new["rows"]) == set(report.load_baseline(os.path.join(REPO, "bench", "baseline.json"))["rows"])
    assert p.returncode in (0, 1)      # 1 only when the double's ratios "regress"
    assert (p.returncode == 1) == any(r[4] == "FAIL" for r in doc["baseline"]["results"])


def test_command_line_rejects_unknown_sections_and_lists():
    p = subprocess.run([sys.executable, "-m", "barecuda.bench", "--rows", "launch,nosuch"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 2 and "nosuch" in p.stderr
    p = subprocess.run([sys.executable, "-m", "barecuda.bench", "--list"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 0 and "launch" in p.stdout and "memory = " in p.stdout


def test_no_gpu_measures_nothing(tmp_path):
    out = tmp_path / "b.json"
    env = dict(_env(), BARECUDA_LIBCUDA=str(tmp_path / "no-such-libcuda.so"))
    p = subprocess.run([sys.executable, "-m", "barecuda.bench", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and "no usable GPU" in p.stdout
    assert "DriverNotFoundError" in json.loads(out.read_text())["skipped"]


def test_tensor_launch_rows_for_the_dist_benchmark(fake):
    """nccl_compare's launch rows on the double: raw C and DeviceBuffers measured, the
    torch/CuPy rows measured or n/a with the reason (no CUDA torch/CuPy here)."""
    from barecuda.bench import dist_rows
    rows = {r["key"]: r for r in dist_rows.tensor_launch_rows(rounds=1)}
    assert list(rows) == ["raw4p", "bc4p", "torch4p", "cupy4p", "raw4pts", "raw4pcs", "rawtorch4p", "torchread4",
                          "floor4pts", "floortorch4p"]
    assert rows["raw4p"]["value"] > 0 and rows["raw4p"]["note"] == "reference"
    assert rows["bc4p"]["value"] > 0 and rows["bc4p"]["note"].endswith("x raw C")
    for k in ("torch4p", "cupy4p", "raw4pts", "raw4pcs", "rawtorch4p", "torchread4", "floor4pts", "floortorch4p"):
        assert (rows[k]["value"] is None) == rows[k]["note"].startswith("n/a")


def test_dlx_launch_batches_reads_each_tensor_then_launches(fake):
    """The raw C form of the torch4p row: per launch, every tensor's address read through
    the class's DLPack C exchange API into its parameter slot, the current stream once,
    then the raw launch; launch=False reads alone. Types without the API are refused."""
    from _helpers import exchange_api_class
    from ptx import PTR2
    import barecuda as bc
    counts = {"dltensor": 0, "stream": 0}
    s = bc.Stream()
    cls = exchange_api_class([s.handle_int], counts)
    k = bc.Module.from_ptx(PTR2).get_kernel("k2")
    b = bc.alloc(64)
    pb = _baseline.ParamBlock([bytes(8)] * 2)
    n = fake.launch_count()
    ts = _baseline.dlx_launch_batches(k.handle_int, 1, 1, pb, s.handle_int, [cls(b.ptr, 0), cls(b.ptr + 24, 0)], 3, 5)
    assert len(ts) == 3 and all(t > 0 for t in ts)
    assert fake.launch_count() - n == 15
    p = fake.last_launch().params
    assert (int.from_bytes(p[0:8], "little"), int.from_bytes(p[8:16], "little")) == (b.ptr, b.ptr + 24)
    assert counts == {"dltensor": 2 * 15 + 1, "stream": 15}      # + the device read before the loop
    _baseline.dlx_launch_batches(k.handle_int, 1, 1, pb, s.handle_int, [cls(b.ptr, 0)], 2, 4, launch=False)
    assert fake.launch_count() - n == 15 and counts["stream"] == 23
    with pytest.raises(TypeError, match="no DLPack C exchange API"):
        _baseline.dlx_launch_batches(k.handle_int, 1, 1, pb, s.handle_int, [object()], 1, 1)
    with pytest.raises(ValueError, match="CUDA device"):
        _baseline.dlx_launch_batches(k.handle_int, 1, 1, pb, s.handle_int, [cls(b.ptr, 0, kind=1)], 1, 1)
    with pytest.raises(ValueError, match="a slot for each"):
        _baseline.dlx_launch_batches(k.handle_int, 1, 1, pb, s.handle_int, [cls(b.ptr, 0)] * 3, 1, 1)


def test_launch_floor_is_called_as_kernel_launch_and_makes_the_raw_launch(fake):
    """LaunchFloor (the launch section's floor rows): called with Kernel.launch's shape,
    one raw launch per call with the preset geometry, stream and parameters; with
    tensors, each call reads its tensor arguments into the slots and the current stream
    once through the exchange API. Wrong argument counts and types are refused."""
    from _helpers import exchange_api_class
    from ptx import PTR2
    import barecuda as bc
    counts = {"dltensor": 0, "stream": 0}
    s = bc.Stream()
    cls = exchange_api_class([s.handle_int], counts)
    k = bc.Module.from_ptx(PTR2).get_kernel("k2")
    b = bc.alloc(64)
    pb = _baseline.ParamBlock([b.ptr.to_bytes(8, "little"), (b.ptr + 8).to_bytes(8, "little")])
    plain = _baseline.LaunchFloor(k.handle_int, (2, 1, 1), 32, pb, s.handle_int)
    assert (plain.nargs, plain.reads) == (2, False)
    n = fake.launch_count()
    for _ in range(3):
        plain.launch(1, 1, "not", "read", stream=s)
    assert fake.launch_count() - n == 3
    last = fake.last_launch()
    assert (last.grid, last.block, last.stream) == ((2, 1, 1), (32, 1, 1), s.handle_int)
    assert int.from_bytes(last.params[0:8], "little") == b.ptr
    t0, t1 = cls(b.ptr + 16, 0), cls(b.ptr + 40, 0)
    fl = _baseline.LaunchFloor(k.handle_int, 1, 1, pb, s.handle_int, [t0, t1])
    assert (fl.nargs, fl.reads, counts["dltensor"]) == (2, True, 1)     # the device read at construction
    fl.launch(1, 1, t0, t1, stream=s)
    fl.launch(1, 1, t1, t0)
    assert counts == {"dltensor": 5, "stream": 2} and fake.launch_count() - n == 5
    p = fake.last_launch().params
    assert (int.from_bytes(p[0:8], "little"), int.from_bytes(p[8:16], "little")) == (b.ptr + 40, b.ptr + 16)
    with pytest.raises(TypeError, match="grid, block and 2 arguments"):
        fl.launch(1, 1, t0)
    with pytest.raises(TypeError, match="no DLPack C exchange API"):
        _baseline.LaunchFloor(k.handle_int, 1, 1, pb, s.handle_int, [object()])
    with pytest.raises(TypeError, match="one type"):
        _baseline.LaunchFloor(k.handle_int, 1, 1, pb, s.handle_int, [t0, object()])
    with pytest.raises(ValueError, match="1 to 2 tensors"):
        _baseline.LaunchFloor(k.handle_int, 1, 1, pb, s.handle_int, [t0] * 3)
    with pytest.raises(ValueError, match="CUDA device"):
        _baseline.LaunchFloor(k.handle_int, 1, 1, pb, s.handle_int, [cls(b.ptr, 0, kind=1)])
    assert fake.launch_count() - n == 5


def test_raw_chain_set_one_pushes_the_value_to_node_0(fake):
    """RawChain.set_one (the graph section's 'floor with the raw call' row): the value
    lands in node 0's u32 slot of the executable, node 1 keeps its own; only parameter
    3 is accepted."""
    import barecuda as bc
    from barecuda.bench import _graphbench, graph_rows
    k = bc.Module.from_ptx(graph_rows.VADD_PTX).get_kernel("gvadd")
    bufs = [bc.alloc(128) for _ in range(3)]
    s = bc.Stream()
    raw = _graphbench.RawChain(k.handle_int, *(b.ptr for b in bufs), 5, 2)
    raw.set_one(3, 7)
    raw.issue(s.handle_int, 1)
    n_of = [int.from_bytes(fake.last_launch(back).params[24:28], "little") for back in (1, 0)]
    assert n_of == [7, 5]
    with pytest.raises(IndexError):
        raw.set_one(2, 7)
    del raw
