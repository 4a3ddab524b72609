#!/usr/bin/env bash
# GPU check of the matvec/dequantize family (issue 23): build, warm the kernel cache in
# parallel, run the GPU tests, a compute-sanitizer memcheck over a subset, and the bench
# table (with the dense tuning sweep). Logs under $OUT (default ./gpu-out). Usage on the
# device machine, from the repository root:  bash tools/kernels_matvec_gpu.sh
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=src BARECUDA_CACHE_DIR=${BARECUDA_CACHE_DIR:-/tmp/bc-kcache}
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$OUT/gpu.txt"
python3 setup.py build_ext --inplace -q -j 16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
stamp built
# warm the compile cache: every matvec/dequant/fused module compiled in parallel (the bench's
# own --warm, which follows the table and the tuning variants the sweep times)
timeout 200 python3 -m barecuda.bench.kernels_matvec_rows --warm > "$OUT/warm.log" 2>&1
stamp "warmed (rc=$?)"; tail -3 "$OUT/warm.log"
timeout 150 python3 -m barecuda.bench.kernels_matvec_rows ${SWEEP---sweep} > "$OUT/bench.log" 2>&1
stamp "bench rc=$?"; cat "$OUT/bench.log"
timeout 130 python3 -m pytest tests/kernels/test_matvec.py tests/kernels/test_dequant.py --gpu -q -p no:cacheprovider -k "not compiles_without_warnings" \
    > "$OUT/tests.log" 2>&1
stamp "tests rc=$?"; grep -E "passed|failed|error" "$OUT/tests.log" | tail -3; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; grep -E "^E " "$OUT/tests.log" | head -25
if [ -n "${MEMCHECK-1}" ]; then
  timeout 50 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m pytest --gpu -q -p no:cacheprovider \
      tests/kernels/test_dequant.py::test_dequantize_tail_chunk_and_offsets \
      "tests/kernels/test_matvec.py::test_matvec_quant_matches_gguf[q6_k-float16]" \
      "tests/kernels/test_matvec.py::test_matvec_quant_matches_gguf[q4_0-bfloat16]" \
      "tests/kernels/test_matvec.py::test_matvec_dense_matches_numpy[float16-float32]" \
      "tests/kernels/test_dequant.py::test_dequantize_matches_gguf[q8_0-float16]" > "$OUT/memcheck.log" 2>&1
  stamp "memcheck rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -3
fi
