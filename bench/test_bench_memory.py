"""Memory rows: allocation + free of 1 MiB (a round = 100 pairs, synced before each
round, not timed) and host<->device copies of 256 MiB (a round = one copy, timed up
to a context synchronize). Row keys as in ``python -m barecuda.bench --json``."""
import pytest

from barecuda.bench import BATCH

ALLOC_ROWS = ["rawalloc", "rawasync", "bcempty", "bcalloc", "cupypool", "torchempty", "cucoreall"]
COPY_ROWS = ["rawh2d_page", "rawh2d_pin", "rawd2h_page", "rawd2h_pin", "bc_to_device", "bc_copy_from",
             "bc_copy_from_pin", "bc_to_numpy", "bc_copy_to", "bc_copy_to_pin", "cupy_h2d", "cupy_d2h",
             "torch_h2d", "torch_h2d_pin", "torch_d2h"]


def row_or_skip(rows, key):
    r = rows.get(key)
    if r is None:
        pytest.skip(f"row {key!r} was not built")
    if r.na:
        pytest.skip(f"n/a: {r.na}")
    return r


@pytest.fixture(scope="module")
def alloc_rows(setup):
    from barecuda import bench
    from barecuda.bench.memory_rows import alloc_rows
    rows = alloc_rows(setup)
    for r in rows:
        bench.check_once(r, setup.B.ctx_sync)
    return {r.key: r for r in rows}


@pytest.fixture(scope="module")
def copy_rows(setup):
    pytest.importorskip("numpy")
    from barecuda.bench.memory_rows import copy_rows
    rows = copy_rows(setup)
    yield {r.key: r for r in rows}
    rows.clear()


@pytest.mark.parametrize("key", ALLOC_ROWS)
def test_alloc_free_1mib_x100(benchmark, setup, alloc_rows, key):
    r = row_or_skip(alloc_rows, key)
    benchmark.group = f"memory: {BATCH} x allocate + free 1 MiB"
    benchmark.extra_info.update(label=r.label, stmt=r.stmt, pairs_per_round=BATCH)
    benchmark.pedantic(lambda: r.run(BATCH), setup=setup.B.ctx_sync, rounds=100, warmup_rounds=2, iterations=1)


@pytest.mark.parametrize("key", COPY_ROWS)
def test_copy_256mib(benchmark, copy_rows, key):
    r = row_or_skip(copy_rows, key)
    benchmark.group = f"memory: copy 256 MiB {r.direction}"
    benchmark.extra_info.update(label=r.label, direction=r.direction, nbytes=256 << 20)
    benchmark.pedantic(r.once, rounds=5, warmup_rounds=1, iterations=1)
    st = getattr(benchmark, "stats", None)
    med = getattr(getattr(st, "stats", None), "median", None)
    if med:
        benchmark.extra_info["GB_per_s"] = round((256 << 20) / med / 1e9, 2)
