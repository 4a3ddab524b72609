#!/bin/sh
# Instructions per launch on the driver double, by callgrind: load-independent, unlike
# the timings of bench/probes/launch_overhead.py on a busy machine.
#   bench/probes/launch_instructions.sh [ROW ...]    (rows: bc0 bc4 bc4p torch4p dlx4p cupy4p bc16 plan4 setarg
#                                               floor4p floortorch4p floordlx4p)
# Each row runs twice (0 and N launches, same set-up); the difference over N is the
# whole cost of one launch from the Python loop: the call, argument parsing, packing,
# tensor reading (torch's conversion included for torch4p), the double's cuLaunchKernel.
set -e
cd "$(dirname "$0")/../.."
N=${N:-5000}
PY=$(python3 -c "import sys; print(sys.executable)")
[ $# -gt 0 ] || set -- bc0 bc4 bc4p torch4p dlx4p cupy4p bc16 plan4 setarg
count() {
    out=$(mktemp)
    PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$PY" bench/probes/launch_overhead.py --loop "$1" --n "$2" >/dev/null 2>&1
    grep '^summary:' "$out" | awk '{print $2}'
    rm -f "$out"
}
for row in "$@"; do
    base=$(count "$row" 0)
    total=$(count "$row" "$N")
    echo "$row $(( (total - base) / N )) instructions per launch"
done
