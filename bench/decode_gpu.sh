#!/bin/bash
# bench/decode_gpu.sh STAGE... -- issue 25's decode work on the GPU machine, stage by stage.
#
#   setup       gguf wheel from .carry/ (the device image lacks it), in-place build (kernels
#               compile on first use; BARECUDA_CACHE=0 in the caller makes each process compile
#               afresh, which keeps the parameter types that a cubin from the cache lacks)
#   lcpp-start  llama.cpp (.carry/llama-src.tar.xz: llama-cpp-python's vendored tree, trimmed)
#               configured and built for sm_90 in the background (setsid: it outlives the
#               call while the machine stays warm), into /tmp/llama.cpp/build
#   lcpp-wait   wait for that build (at most LCPP_WAIT seconds, default 300)
#   tests       the fused kernels' and the models' GPU tests
#   smol        SmolLM2-135M joined from .carry/smol1/part + .carry/smol2/part (the 93 MB file is
#               over the carry: two calls), its GPU test, an answer, tg128 and llama-bench on it
#   scale       issue 25's checks at scale: tests/models/test_scale_gpu.py (1B F16, 1B Q4_K_M, 8B F16
#               against torch float32; the files go to /tmp/decode, shared with `bench`)
#   attn        the attention and GEMM kernels' GPU tests (tests/kernels/test_{attention,matmul}.py)
#   attn-bench  the kernels_attention rows (decode GB/s at 4k-32k, prefill), with the decode
#               tile sweep when BARECUDA_BENCH_TUNE=decode
#   bench       the decode table (barecuda fused/unfused, torch eager/graph/compile, llama.cpp),
#               per-node breakdown, logits/greedy against torch float32 (DECODE_ARGS adds flags)
# Logs go to $OUT (the device tool's folder), default /tmp/out.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src PATH=/opt/torch/.venv/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LC=/tmp/llama.cpp
LB=$LC/build/bin/llama-bench
SMOL=/tmp/SmolLM2-135M-Instruct.Q4_1.gguf
t0=$(date +%s)
stamp() { echo "== $1 ($(( $(date +%s) - t0 )) s)"; }

for st in "$@"; do
  stamp "$st"
  case $st in
  setup)
    python3 -c "import gguf" 2>/dev/null || python3 -m pip install -q --no-deps .carry/gguf-*.whl 2>&1 | tail -2
    rm -rf src/barecuda/kernels/prebuilt
    python3 setup.py build_ext --inplace -q -j 16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader ;;
  lcpp-start)
    if [ ! -x "$LB" ]; then
      rm -rf $LC && mkdir -p /tmp/lcpp-src && tar xJf .carry/llama-src.tar.xz -C /tmp/lcpp-src && mv /tmp/lcpp-src/llama.cpp $LC
      setsid bash -c "cd $LC && cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release > $LC/configure.log 2>&1 \
        && ninja -C build -j ${LCPP_JOBS:-10} llama-bench > $LC/build.log 2>&1; echo rc=\$? > $LC/done" < /dev/null > /dev/null 2>&1 &
      echo "llama.cpp build started in the background"
    fi ;;
  lcpp-wait)
    for _ in $(seq 1 "${LCPP_WAIT:-300}"); do [ -f $LC/done ] || [ -x "$LB" ] && break; sleep 1; done
    cat $LC/done 2>/dev/null; tail -5 $LC/configure.log 2>/dev/null; tail -5 $LC/build.log 2>/dev/null
    cp $LC/configure.log $LC/build.log "$OUT/" 2>/dev/null
    ls -la "$LB" 2>/dev/null || echo "no llama-bench" ;;
  tests)
    python3 -m pytest tests/kernels/test_fused.py tests/models/test_llama_gpu.py --gpu -q -p no:cacheprovider \
      -k "not smollm2" 2>&1 | tee "$OUT/tests.log" | tail -25 ;;
  smol)
    [ -f $SMOL ] || cat .carry/smol1/part .carry/smol2/part > $SMOL
    sha256sum $SMOL
    BARECUDA_TEST_GGUF=$SMOL python3 -m pytest tests/models/test_llama_gpu.py --gpu -q -s -p no:cacheprovider \
      -k smollm2 2>&1 | tee "$OUT/smol.log" | grep -v "^$" | tail -12
    python3 examples/llama_generate.py $SMOL "What is the capital of France?"
    python3 -m barecuda.models.llama generate --gguf $SMOL --prompt "Write a haiku about the sea." --max-new 48
    for v in "" "--pdl" "--unfused"; do python3 -m barecuda.models.llama bench --gguf $SMOL $v; done
    [ -x "$LB" ] && $LB -m $SMOL -p 0 -n 128 -r 5 -fa 1 -ngl 99 2>&1 | grep -E "^\|" ;;
  scale)
    BARECUDA_DECODE_DIR=${BARECUDA_DECODE_DIR:-/tmp/decode} timeout ${SCALE_TIMEOUT:-240} python3 -m pytest tests/models/test_scale_gpu.py \
      --gpu -q -s -p no:cacheprovider 2>&1 | tee "$OUT/scale.log" | grep -E "vs torch|passed|failed|Error|assert" ;;
  attn)
    timeout ${ATTN_TIMEOUT:-150} python3 -m pytest tests/kernels/test_attention.py tests/kernels/test_matmul.py --gpu -q \
      -p no:cacheprovider 2>&1 | tee "$OUT/attn.log" | tail -8 ;;
  attn-bench)
    timeout ${ATTN_BENCH_TIMEOUT:-120} python3 -m barecuda.bench.kernels_attention_rows 2>&1 | tee "$OUT/attn_bench.log" ;;
  bench)
    [ -d $LC ] && export BARECUDA_LLAMA_BENCH=$LB BARECUDA_LLAMA_WAIT=${LCPP_WAIT:-0}
    python3 -m barecuda.bench.decode_rows --dir /tmp/decode --json "$OUT/decode${DECODE_TAG:-}.json" ${DECODE_ARGS:-} 2>&1 \
      | tee "$OUT/decode${DECODE_TAG:-}.log" ;;
  check)
    for f in ${CHECK_FILES:-/tmp/decode/llama-8b-F16.gguf}; do
      python3 -c "import sys; from barecuda.bench.decode_rows import check_vs_torch as c; print(sys.argv[1], 'vs torch fp32:', c(sys.argv[1]))" $f
    done ;;
  *) echo "unknown stage $st"; exit 2 ;;
  esac
done
stamp done
