#!/usr/bin/env bash
# The one script to run on the GPU machine:
#   build in place -> kernel warmup -> seed checks -> GPU test suite -> compute-sanitizer (memcheck over the GPU suite,
#   racecheck + synccheck over the staging and pool tests) -> doctor -> benchmark with the baseline comparison
# Full logs go to $OUT (default /tmp/barecuda-gpu-check): build.log, seeds.log, tests.log, memcheck.log,
# racecheck.log, synccheck.log, doctor.log, bench.log, bench.json, summary.txt. Every stage runs even when an
# earlier one failed; the last lines printed are the benchmark table, the baseline comparison and a pass/fail
# summary of each stage. The whole run is kept under 9 minutes: each stage gets a timeout from what is left.
#
# Usage: tools/gpu-check.sh [--part 1|2] [--stages LIST] [--shard K/N] [--memcheck-jobs J] [--update-baseline]
#   --part 1           = --stages build,seeds,tests,memcheck (memcheck over every GPU test file)
#   --part 2           = --stages build,racecheck,synccheck,doctor,bench
#                      (two device calls cover everything; without --part every stage runs, which one
#                      call's time limit may cut short)
#   --stages LIST      comma-separated subset of build,seeds,tests,memcheck,racecheck,synccheck,doctor,bench
#   --shard K/N        memcheck runs shard K of N of the GPU test files (the seed checks are in shard N)
#   --memcheck-jobs J  this run's memcheck files split over J sanitizer processes at once (default: 4 on a
#                      machine of 8 cores or more, else 1); each has its log memcheck.K.log, joined into
#                      memcheck.log. The GPU suite's files are independent (each makes its own buffers).
#   The tests stage runs the files in parallel with pytest-xdist (-n 8 --dist loadfile) when it is there.
#   --update-baseline  rewrite bench/baseline.json (and $OUT/baseline.json) with this run's ratios to raw C
#   GPU_CHECK_SECONDS  the whole run's time budget (default 570); stages get timeouts from what is left
#   GPU_WHEELS         a folder of wheels to install (pip --no-deps --no-index) before the tests: the device image
#                      lacks gguf (and tokenizers), without which about 500 tests skip (the summary then says MISSING)
#   TESTS_SECONDS      the tests stage's cap (default 360: the suite with tests/kernels and tests/models,
#                      the 8B scale check included, took 186-240 s on a fresh H200, NVRTC compiles included)
#
# Under memcheck BARECUDA_UNDER_SANITIZER=memcheck is set: a test that streams gigabytes (the 8B model checks)
# skips itself there, saying so, since instrumented kernels run 10-100x slower.
# memcheck runs with --leak-check full over EVERY GPU test file (any tests/**/test_*.py that marks tests
# `gpu`: program, NCCL, IPC, seeds, and the tests/kernels/ and tests/models/ folders when they exist), with
# `-m gpu`, in two shards. The pytest plugin tools/gpu_leak_plugin.py frees what barecuda caches (pools
# trimmed, garbage collected) at the end of the session, so a "Leaked N bytes" report is memory that nothing
# freed: the stage then fails (LEAKS) even when pytest and the error summary pass. In the shard with the seed
# checks, a pytest failure of tests/stress/test_concurrency_gpu.py alone is reported as TIMING (their margins are timings,
# which the sanitizer distorts), not as a failure; sanitizer errors and leaks still fail it.
# NCCL tests need 2 GPUs for their multi-rank cases; on one GPU those skip and the rest run.
#
# compute-sanitizer flags (docs/measurements.md says the same):
#   --report-api-errors no             barecuda provokes driver API errors on purpose (probing
#                                      cuPointerGetAttribute on foreign pointers, cuFuncGetParamInfo past the last
#                                      parameter, optional symbols); they are handled, and reporting them would drown
#                                      real reports. Memory errors in kernels and in copies are still reported.
#   --target-processes application-only  the suite's subprocess tests (doctor, benchmark CLI) run unsanitized.
#   --error-exitcode 86                a sanitizer finding fails the stage even when pytest passes.
#   --leak-check full                  memcheck: device allocations never freed are reported (and fail the stage).
#   racecheck and synccheck run the staging and pool GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/barecuda-gpu-check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
START=$(date +%s)
DEADLINE=$((START + ${GPU_CHECK_SECONDS:-570}))          # 9.5 min unless told
export BARECUDA_BUILD_JOBS=$JOBS
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
UPDATE=0
STAGES=build,seeds,tests,memcheck,racecheck,synccheck,doctor,bench
SHARD=1/1
MEMJOBS=$(( JOBS >= 8 ? 4 : 1 ))
while (( $# )); do
    case $1 in
        --update-baseline) UPDATE=1 ;;
        --part|--part=*)
            if [[ $1 == --part ]]; then shift; p=${1:-}; else p=${1#--part=}; fi
            case $p in
                1) STAGES=build,seeds,tests,memcheck; SHARD=1/1 ;;
                2) STAGES=build,racecheck,synccheck,doctor,bench; SHARD=1/1 ;;
                *) echo "gpu-check.sh: --part 1 or 2" >&2; exit 2 ;;
            esac ;;
        --stages) shift; STAGES=${1:-} ;;
        --stages=*) STAGES=${1#--stages=} ;;
        --shard) shift; SHARD=${1:-} ;;
        --shard=*) SHARD=${1#--shard=} ;;
        --memcheck-jobs) shift; MEMJOBS=${1:-} ;;
        --memcheck-jobs=*) MEMJOBS=${1#--memcheck-jobs=} ;;
        -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
        *) echo "gpu-check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[[ $SHARD =~ ^([0-9]+)/([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= BASH_REMATCH[2] )) \
    || { echo "gpu-check.sh: --shard K/N with 1 <= K <= N" >&2; exit 2; }
SHARD_K=${BASH_REMATCH[1]}; SHARD_N=${BASH_REMATCH[2]}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
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
# memcheck covers every file with GPU tests (a `gpu` mark anywhere in it), found by a glob so that new
# folders (tests/kernels/, tests/models/) are in without editing this script; split in two shards by
# alternating files, the seed checks in shard 2.
mapfile -t GPU_FILES < <(find tests -name 'test_*.py' -not -path '*/fakecuda/*' -print0 2>/dev/null \
    | xargs -0 grep -lE 'mark\.gpu|pytestmark *= *.*gpu' 2>/dev/null | grep -v "^$SEEDS\$" | sort)
# this run's memcheck shard: files i with i % N == K-1, the seed checks in shard N
MEM_FILES=()
for i in "${!GPU_FILES[@]}"; do (( i % SHARD_N == SHARD_K - 1 )) && MEM_FILES+=("${GPU_FILES[$i]}"); done
(( SHARD_K == SHARD_N )) && MEM_FILES+=("$SEEDS")
MEMFLAGS=(--leak-check full)
export PYTHONPATH="$REPO/tools:$PYTHONPATH"      # gpu_leak_plugin (loaded with -p under memcheck only)
# memcheck_stage NAME TIMEOUT FILES...: memcheck with the leak check over FILES, split over MEMJOBS
# sanitizer processes running at once (logs NAME.K.log, joined into NAME.log); one status line each.
# The status says LEAKS when a device allocation was never freed, TIMING when only seed checks failed
# (see the header).
memcheck_stage() {
    local name=$1 t=$2; shift 2
    local files=("$@") j k t0 rc st log
    local n=$MEMJOBS; (( n > ${#files[@]} )) && n=${#files[@]}; (( n < 1 )) && n=1
    t0=$(date +%s)
    echo; echo "=== [$name] ${#files[@]} files over $n sanitizer processes (timeout ${t}s) ==="
    for (( k = 1; k <= n; k++ )); do
        local part=()
        for j in "${!files[@]}"; do (( j % n == k - 1 )) && part+=("${files[$j]}"); done
        ( BARECUDA_UNDER_SANITIZER=memcheck timeout -k 10 "$t" "$SAN" --tool memcheck "${SANFLAGS[@]}" "${MEMFLAGS[@]}" \
            "${PYTEST[@]}" -p gpu_leak_plugin -m gpu "${part[@]}" -q -rfE -k "not grow_the_heap" \
            > "$OUT/$name.$k.log" 2>&1; echo $? > "$OUT/$name.$k.rc" ) &   # (the sanitizer's own allocations grow RSS)
    done
    wait
    : > "$OUT/$name.log"
    for (( k = 1; k <= n; k++ )); do
        log="$OUT/$name.$k.log"; rc=$(cat "$OUT/$name.$k.rc" 2>/dev/null || echo 1)
        { echo "=== [$name.$k] rc=$rc"; cat "$log"; } >> "$OUT/$name.log"
        st=PASS
        (( rc == 124 || rc == 137 )) && st="TIMEOUT(${t}s)" || { (( rc == 86 )) && st="SANITIZER-ERRORS"; } \
            || { (( rc != 0 )) && st="FAIL(rc=$rc)"; }
        # LEAKS only for barecuda's own allocations: torch's caching allocator and cuBLAS
        # handle, CuPy's pools keep memory for the process's life (tools/leak_report.py).
        local nleak nerr
        nleak=$(grep -cE '^========= Leaked [0-9,]+ bytes' "$log"); nerr=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | grep -oE '[0-9]+' | tail -1)
        if (( nleak > 0 )) && ! "$PY" tools/leak_report.py "$log" > "$OUT/$name.$k.leaks"; then
            st="LEAKS"
        elif [[ $st == SANITIZER-ERRORS ]] && (( nleak > 0 && nleak == ${nerr:-0} )) \
                && ! grep -qE '^FAILED ' "$log"; then
            st="PASS(peer leaks only)"          # every sanitizer error a leak of torch's/CuPy's
        elif [[ $st == FAIL* ]] && grep -qE '^FAILED ' "$log" \
                && ! grep -E '^FAILED ' "$log" | grep -qv "^FAILED $SEEDS::"; then
            st="TIMING(seeds only)"
        fi
        echo "[$name.$k] $st: $(grep -E '(passed|failed|error)' "$log" | grep -v 'ERROR SUMMARY' | tail -1)" \
            "$(head -1 "$OUT/$name.$k.leaks" 2>/dev/null)"
        cat "$OUT/$name.$k.leaks" >> "$OUT/$name.log" 2>/dev/null; rm -f "$OUT/$name.$k.leaks"
        NAMES+=("$name.$k"); STATUS+=("$st"); SECS+=($(( $(date +%s) - t0 )))
        rm -f "$OUT/$name.$k.rc" "$log"
    done
}

if [ -n "${GPU_WHEELS:-}" ]; then
    for w in "$GPU_WHEELS"/*.whl; do "$PY" -m pip install -q --no-deps --no-index "$w" 2>&1 | tail -1; done
fi
LOCK=(); command -v flock >/dev/null && LOCK=(flock /tmp/barecuda-build.lock)
want build && stage build build.log "$(budget 150 420)" "${LOCK[@]}" "$PY" setup.py build_ext --inplace -q -j "$JOBS"
echo "GPU test files: ${GPU_FILES[*]} $SEEDS; memcheck shard $SHARD_K/$SHARD_N: ${MEM_FILES[*]}"
# reserves: what the later stages of this run need (the stages not run need nothing)
r_after_tests=0; want memcheck && r_after_tests=130; want racecheck && r_after_tests=$((r_after_tests + 50))
want bench && r_after_tests=$((r_after_tests + 180))
# the kernel table compiled in parallel into the compile cache first (python -m barecuda.kernels warmup: one
# NVRTC compile per CPU at once): on a fresh machine the suite's workers otherwise compile every kernel
# module on first use, one at a time each, and a cold run of the tests stage went past 430 s (2026-11-27)
if want tests || want memcheck || want seeds; then
    stage warmup warmup.log "$(budget 240 $((r_after_tests + 200)))" "$PY" -m barecuda.kernels warmup --quiet
fi
want seeds && stage seeds seeds.log "$(budget 60 $((r_after_tests + 230)))" "${PYTEST[@]}" "$SEEDS" -v -rs
XDIST=(); "$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 8 --dist loadfile)
# not kernel_sources: NVRTC building every kernel source for sm_80/sm_90 and reading the log is CPU work
# that CPU CI does (.ci/run step 1); here it took the time the GPU tests need: with the gguf wheels
# carried, the whole suite ran past 470 s at 97% (2026-11-27 19:2x, H200), 0 failed
want tests && stage tests tests.log "$(budget "${TESTS_SECONDS:-360}" "$r_after_tests")" "${PYTEST[@]}" tests "${XDIST[@]}" -q -rfEs \
    --tb=short --durations=10 --ignore="$SEEDS" -m "not kernel_sources"
r_after_mem=0; want racecheck && r_after_mem=50; want synccheck && r_after_mem=$((r_after_mem + 40))
want bench && r_after_mem=$((r_after_mem + 180))
if [ -n "$SAN" ]; then
    want memcheck && memcheck_stage memcheck "$(budget 600 "$r_after_mem")" "${MEM_FILES[@]}"
    # shellcheck disable=SC2086 -- RACE_TESTS is a list of paths
    want racecheck && stage racecheck racecheck.log "$(budget 40 $((r_after_mem - 50)))" "$SAN" --tool racecheck \
        "${SANFLAGS[@]}" "${PYTEST[@]}" $RACE_TESTS -q
    # shellcheck disable=SC2086
    want synccheck && stage synccheck synccheck.log "$(budget 40 $((r_after_mem - 90)))" "$SAN" --tool synccheck \
        "${SANFLAGS[@]}" "${PYTEST[@]}" $RACE_TESTS -q
else
    for t in memcheck racecheck synccheck; do want $t && skip $t "no compute-sanitizer"; done
fi
want doctor && stage doctor doctor.log "$(budget 30 150)" "$PY" -m barecuda
# the launch, memory, graph, compile and distributed sections (the baseline rows); the kernel sections take
# minutes of their own and run in a call of their own (BENCH_ROWS=kernels_norms,... or all)
BENCH_ROWS=${BENCH_ROWS:-launch,threads,alloccheck,alloc,copy,smallcopy,staging,graph,compile,allreduce,ipc,peercopy}
BENCH=("$PY" -m barecuda.bench --rows "$BENCH_ROWS" --rounds 15 --json "$OUT/bench.json" --baseline bench/baseline.json)
(( UPDATE )) && BENCH+=(--update-baseline "$OUT/baseline.json")
want bench && stage bench bench.log "$(budget 150 5)" "${BENCH[@]}"
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
    # whole files skipped for a module this machine lacks (the device image has no gguf: the quantized
    # matvec/dequantize, fused and models files then skip, about 500 tests; carry the wheels, GPU.md)
    miss=$(grep -E "^SKIPPED .*could not import '" "$OUT/tests.log" 2>/dev/null \
        | sed -E "s/.*could not import '([^']+)'.*/\1/" | sort | uniq -c | awk '{printf "%s (%s files) ", $2, $1}')
    [ -n "$miss" ] && echo "MISSING:     test files skipped for modules this machine lacks: $miss-- install their wheels first"
    [ -f "$OUT/memcheck.log" ] && awk '/^=== \[memcheck\./ {n = $2} /ERROR SUMMARY/ {print n, $0}' \
        "$OUT/memcheck.log" | sed 's/^/memcheck:    /'
    for t in racecheck synccheck; do
        [ -f "$OUT/$t.log" ] && echo "$(printf '%-12s' "$t:") $(grep -E 'ERROR SUMMARY' "$OUT/$t.log" | tail -1)" \
            "| pytest: $(grep -E '(passed|failed|error)' "$OUT/$t.log" | grep -v 'ERROR SUMMARY' | tail -1)"
    done
    [ -f "$OUT/memcheck.log" ] && grep -E 'Leaked [0-9]+ bytes|LEAK SUMMARY' "$OUT/memcheck.log" | head -5 \
        | sed 's/^/memcheck leak: /'
    grep -E '^(driver|state|self-check|launch overhead|status):' "$OUT/doctor.log" 2>/dev/null | sed 's/^/doctor:      /'
    grep -E '^  \[[0-9]+\]' "$OUT/doctor.log" 2>/dev/null | head -4 | sed 's/^ */device:      /'
    grep -E '^baseline: ' "$OUT/bench.log" 2>/dev/null | tail -1 | sed 's/^baseline: /baseline:    /' \
        || echo "baseline:    (no comparison: see bench.log)"
} | tee "$OUT/summary.txt"
# The device tool returns at most 8 files: keep summary, tests, memcheck, bench log and json, and pack every
# log into one archive.
( cd "$OUT" && tar czf logs.tgz ./*.log 2>/dev/null && rm -f build.log seeds.log racecheck.log synccheck.log doctor.log )
# the exit status: 0 only when every stage run passed (TIMING of the seed checks under memcheck included)
for st in "${STATUS[@]}"; do [[ $st == PASS* || $st == TIMING* || $st == SKIPPED* ]] || exit 1; done
exit 0
