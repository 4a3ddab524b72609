#!/usr/bin/env bash
# The one script to run on the GPU machine:
#   build in place -> seed checks -> GPU test suite -> compute-sanitizer (memcheck over the GPU suite,
#   racecheck + synccheck over the staging and pool tests) -> doctor -> benchmark with the baseline comparison
# Full logs go to $OUT (default /tmp/barecuda-gpu-check): build.log, seeds.log, tests.log, memcheck.log,
# racecheck.log, synccheck.log, doctor.log, bench.log, bench.json, summary.txt. Every stage runs even when an
# earlier one failed; the last lines printed are the benchmark table, the baseline comparison and a pass/fail
# summary of each stage. The whole run is kept under 9 minutes: each stage gets a timeout from what is left.
#
# Usage: tools/gpu-check.sh [--update-baseline]
#   --update-baseline  rewrite bench/baseline.json (and $OUT/baseline.json) with this run's ratios to raw C
#
# compute-sanitizer flags (docs/measurements.md says the same):
#   --report-api-errors no             barecuda provokes driver API errors on purpose (probing
#                                      cuPointerGetAttribute on foreign pointers, cuFuncGetParamInfo past the last
#                                      parameter, optional symbols); they are handled, and reporting them would drown
#                                      real reports. Memory errors in kernels and in copies are still reported.
#   --target-processes application-only  the suite's subprocess tests (doctor, benchmark CLI) run unsanitized.
#   --error-exitcode 86                a sanitizer finding fails the stage even when pytest passes.
#   memcheck runs the GPU suite without the seed checks (their concurrency margins are timings, which the
#   sanitizer distorts); racecheck and synccheck run the staging and pool GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/barecuda-gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
START=$(date +%s)
DEADLINE=$((START + 570))          # 9.5 min
export BARECUDA_BUILD_JOBS=$JOBS
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
UPDATE=0
for a in "$@"; do
    case $a in
        --update-baseline) UPDATE=1 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "gpu-check.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done

declare -a NAMES STATUS SECS
left() { echo $((DEADLINE - $(date +%s))); }
# budget CAP RESERVE: seconds for the next stage: at most CAP, leaving RESERVE for later stages
budget() {
    local l=$(( $(left) - $2 )); (( l > $1 )) && l=$1; (( l < 30 )) && l=30; echo $l
}
# stage NAME LOG TIMEOUT CMD...: run, tee to $OUT/LOG, record status
stage() {
    local name=$1 log=$2 t=$3; shift 3
    local t0=$(date +%s)
    echo; echo "=== [$name] $* (timeout ${t}s) ==="
    timeout -k 10 "$t" "$@" 2>&1 | tee "$OUT/$log"
    local rc=${PIPESTATUS[0]}
    local st=PASS
    (( rc == 124 || rc == 137 )) && st="TIMEOUT(${t}s)" || { (( rc == 86 )) && st="SANITIZER-ERRORS"; } \
        || { (( rc != 0 )) && st="FAIL(rc=$rc)"; }
    NAMES+=("$name"); STATUS+=("$st"); SECS+=($(( $(date +%s) - t0 )))
    return 0
}
skip() { NAMES+=("$1"); STATUS+=("SKIPPED($2)"); SECS+=(0); echo "=== [$1] skipped: $2 ==="; }

echo "=== environment ==="
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } || echo "nvidia-smi: not available"
$PY -c 'import sys, platform; print("python", sys.version.split()[0], platform.platform())'

PYTEST=("$PY" -m pytest --gpu -p no:cacheprovider)
SAN=$(command -v compute-sanitizer || { [ -x /usr/local/cuda/bin/compute-sanitizer ] && echo /usr/local/cuda/bin/compute-sanitizer; })
SANFLAGS=(--report-api-errors no --target-processes application-only --error-exitcode 86 --print-limit 20)
SEEDS=tests/stress/test_concurrency_gpu.py
# racecheck/synccheck: the pool tests and one staging case (every staging case under racecheck
# does not fit the run: 40 s covered only part of the file on the H200)
RACE_TESTS="$(ls tests/memory/test_pool*gpu*.py 2>/dev/null | tr '\n' ' ') tests/memory/test_staging_gpu.py::test_htod[default-1-stream]"
# memcheck runs over the tests that exercise ownership, launch, graphs and pools (the whole suite under the
# sanitizer takes far longer than one device call allows)
MEM_TESTS=$(ls tests/memory/test_buffers_gpu.py tests/interop/test_interop_gpu.py tests/memory/test_ownership*gpu*.py tests/launch/test_launch*gpu*.py tests/graph/test_graph_gpu.py tests/memory/test_pool*gpu*.py 2>/dev/null | tr '\n' ' ')

LOCK=(); command -v flock >/dev/null && LOCK=(flock /tmp/barecuda-build.lock)
stage build build.log "$(budget 150 420)" "${LOCK[@]}" "$PY" setup.py build_ext --inplace -q -j "$JOBS"
stage seeds seeds.log "$(budget 60 400)" "${PYTEST[@]}" "$SEEDS" -v -rs
stage tests tests.log "$(budget 230 200)" "${PYTEST[@]}" tests -q -rfEs --tb=short --durations=10 --ignore="$SEEDS"
if [ -n "$SAN" ]; then
    # shellcheck disable=SC2086 -- MEM_TESTS is a list of paths
    stage memcheck memcheck.log "$(budget 150 130)" "$SAN" --tool memcheck "${SANFLAGS[@]}" \
        "${PYTEST[@]}" $MEM_TESTS -q -k "not grow_the_heap"   # the sanitizer's own allocations grow RSS
    # shellcheck disable=SC2086 -- RACE_TESTS is a list of paths
    stage racecheck racecheck.log "$(budget 40 110)" "$SAN" --tool racecheck "${SANFLAGS[@]}" \
        "${PYTEST[@]}" $RACE_TESTS -q
    # shellcheck disable=SC2086
    stage synccheck synccheck.log "$(budget 40 90)" "$SAN" --tool synccheck "${SANFLAGS[@]}" \
        "${PYTEST[@]}" $RACE_TESTS -q
else
    for t in memcheck racecheck synccheck; do skip $t "no compute-sanitizer"; done
fi
stage doctor doctor.log "$(budget 30 60)" "$PY" -m barecuda
BENCH=("$PY" -m barecuda.bench --rounds 15 --json "$OUT/bench.json" --baseline bench/baseline.json)
(( UPDATE )) && BENCH+=(--update-baseline "$OUT/baseline.json")
stage bench bench.log "$(budget 150 5)" "${BENCH[@]}"
if (( UPDATE )) && [ -s "$OUT/baseline.json" ]; then
    cp "$OUT/baseline.json" bench/baseline.json && echo "bench/baseline.json rewritten (copy in $OUT/baseline.json)"
fi

# ---------------------------------------------------------------- summary (printed last)
{
    echo
    echo "=== benchmark table (full log: $OUT/bench.log, figures: $OUT/bench.json) ==="
    if grep -q '^=====' "$OUT/bench.log" 2>/dev/null; then
        sed -n '/^=====/,$p' "$OUT/bench.log"
    else
        echo "(no table: see bench.log)"; tail -5 "$OUT/bench.log" 2>/dev/null
    fi
    echo
    echo "=== summary: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), total $(( $(date +%s) - START )) s, logs in $OUT ==="
    for i in "${!NAMES[@]}"; do
        printf '%-12s %-22s %4ss\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"
    done
    echo "seeds:       $(grep -E '(passed|failed|error|skipped)' "$OUT/seeds.log" 2>/dev/null | tail -1)"
    grep -E '^tests/stress/test_concurrency_gpu.py::' "$OUT/seeds.log" 2>/dev/null | sed 's/^/seed:        /'
    echo "tests:       $(grep -E '(passed|failed|error|skipped)' "$OUT/tests.log" 2>/dev/null | tail -1)"
    for t in memcheck racecheck synccheck; do
        [ -f "$OUT/$t.log" ] && echo "$(printf '%-12s' "$t:") $(grep -E 'ERROR SUMMARY' "$OUT/$t.log" | tail -1)" \
            "| pytest: $(grep -E '(passed|failed|error)' "$OUT/$t.log" | grep -v 'ERROR SUMMARY' | tail -1)"
    done
    grep -E '^(driver|state|self-check|launch overhead|status):' "$OUT/doctor.log" 2>/dev/null | sed 's/^/doctor:      /'
    grep -E '^  \[[0-9]+\]' "$OUT/doctor.log" 2>/dev/null | head -4 | sed 's/^ */device:      /'
    grep -E '^baseline: ' "$OUT/bench.log" 2>/dev/null | tail -1 | sed 's/^baseline: /baseline:    /' \
        || echo "baseline:    (no comparison: see bench.log)"
} | tee "$OUT/summary.txt"
# The device tool returns at most 8 files: keep summary, tests, memcheck, bench log and json, and pack every
# log into one archive.
( cd "$OUT" && tar czf logs.tgz ./*.log 2>/dev/null && rm -f build.log seeds.log racecheck.log synccheck.log doctor.log )
