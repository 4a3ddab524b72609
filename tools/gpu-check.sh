#!/usr/bin/env bash
# The one script to run on the GPU machine (see ../shared/GPU.md):
#   build in place -> GPU test suite -> doctor -> benchmark (-> pytest-benchmark suite if time is left)
# Full logs go to $OUT (default /tmp/barecuda-gpu-check): build.log, tests.log, doctor.log,
# bench.log, bench.json, bench_suite.log, summary.txt. Every stage runs even when an earlier one
# failed; the last lines printed are the benchmark table and a pass/fail summary of each stage.
# The whole run is kept under 9 minutes (each stage gets a timeout from what is left).
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/barecuda-gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
START=$(date +%s)
DEADLINE=$((START + 530))          # 8 min 50 s
export BARECUDA_BUILD_JOBS=$JOBS
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"

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
    (( rc == 124 || rc == 137 )) && st="TIMEOUT(${t}s)" || { (( rc != 0 )) && st="FAIL(rc=$rc)"; }
    NAMES+=("$name"); STATUS+=("$st"); SECS+=($(( $(date +%s) - t0 )))
    return 0
}

echo "=== environment ==="
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } || echo "nvidia-smi: not available"
$PY -c 'import sys, platform; print("python", sys.version.split()[0], platform.platform())'

LOCK=(); command -v flock >/dev/null && LOCK=(flock /tmp/barecuda-build.lock)
stage build build.log "$(budget 150 360)" "${LOCK[@]}" "$PY" setup.py build_ext --inplace -q -j "$JOBS"
stage tests tests.log "$(budget 170 280)" "$PY" -m pytest tests --gpu -q -rs -p no:cacheprovider
stage doctor doctor.log "$(budget 60 240)" "$PY" -m barecuda
stage bench bench.log "$(budget 250 15)" "$PY" -m barecuda.bench --json "$OUT/bench.json"
if (( $(left) > 60 )); then
    stage bench-suite bench_suite.log "$(budget 90 5)" "$PY" -m pytest bench --benchmark-only -q -p no:cacheprovider \
        --benchmark-columns=median,iqr,rounds --benchmark-sort=name
else
    NAMES+=("bench-suite"); STATUS+=("SKIPPED(no time left)"); SECS+=(0)
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
    echo "tests:       $(grep -E '(passed|failed|error|skipped)' "$OUT/tests.log" 2>/dev/null | tail -1)"
    grep -E '^(driver|self-check|launch overhead|status):' "$OUT/doctor.log" 2>/dev/null | sed 's/^/doctor:      /'
    grep -E '^  \[[0-9]+\]' "$OUT/doctor.log" 2>/dev/null | head -4 | sed 's/^ */device:      /'
    echo "bench-suite: $(grep -E '(passed|failed|error|skipped)' "$OUT/bench_suite.log" 2>/dev/null | tail -1)"
} | tee "$OUT/summary.txt"
