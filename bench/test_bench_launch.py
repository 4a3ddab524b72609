"""Launch rows: issue cost of a batch of 100 asynchronous launches (stream synced
before each round, not timed), and one launch + synchronize round trip.

Row keys are those of ``python -m barecuda.bench --json`` (``launch[].key``)."""
import pytest

from barecuda.bench import BATCH

ISSUE_ROWS = ["raw0", "raw4", "raw4p", "raw16", "rawex4", "bc0", "bc4", "bc4p", "torch4p", "cupy4p", "raw4pts", "raw4pcs", "rawtorch4p", "torchread4", "floor4pts", "floortorch4p", "bc16", "plan4", "all4", "plist4",
              "bcex4", "bcexplan4", "gilrel4", "gilheld4", "cucore", "cubind", "cupy", "torch", "triton", "ctypes"]
ROUNDTRIP_ROWS = ["raw4", "bc4", "raw4p", "bc4p", "torch4p", "cupy4p", "plan4", "rawex4", "bcex4", "bcexplan4", "cucore", "cubind", "cupy", "torch", "triton",
                  "ctypes"]


def row_or_skip(rows, key):
    r = rows.get(key)
    if r is None:
        pytest.skip(f"row {key!r} was not built")
    if r.na:
        pytest.skip(f"n/a: {r.na}")
    return r


@pytest.mark.parametrize("key", ISSUE_ROWS)
def test_issue_batch_of_100(benchmark, launch_rows, key):
    r = row_or_skip(launch_rows, key)
    benchmark.group = f"launch: issue, one batch of {BATCH} launches"
    benchmark.extra_info.update(label=r.label, stmt=r.stmt, launches_per_round=BATCH, ref=r.ref)
    run, sync = r.run, r.sync
    if getattr(r, "setup", None):
        r.setup()
    try:
        benchmark.pedantic(lambda: run(BATCH), setup=sync, rounds=200, warmup_rounds=3, iterations=1)
    finally:
        sync()
        if getattr(r, "teardown", None):
            r.teardown()


@pytest.mark.parametrize("key", ROUNDTRIP_ROWS)
def test_launch_sync_roundtrip(benchmark, launch_rows, key):
    r = row_or_skip(launch_rows, key)
    if r.per != 1:
        pytest.skip("batched row: no single-launch round trip")
    benchmark.group = "launch: one launch + synchronize"
    benchmark.extra_info.update(label=r.label, stmt=r.stmt, ref=r.ref)
    run, sync = r.run, r.sync

    def once():
        run(1)
        sync()

    if getattr(r, "setup", None):
        r.setup()
    try:
        benchmark.pedantic(once, rounds=500, warmup_rounds=10, iterations=1)
    finally:
        if getattr(r, "teardown", None):
            r.teardown()
