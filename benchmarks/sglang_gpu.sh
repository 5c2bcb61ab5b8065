#!/usr/bin/env bash
# SGLang's own JIT on the lent GPU machine (issue 41's GPU part): SGLang's JIT-kernel tests plain vs
# routed vs routed-warm, and the first-load benchmark of a CUTLASS module and the n-gram module.
# Run from the project root there, with `.device` carried; what it needs lies in .device/sgl
# (never committed): sglang-slim.tar.xz (the 0.5.23 wheel's Python tree and dist-info),
# flashinfer-slim.tar.xz + cutlass.tar.xz (FlashInfer 0.7.4's headers, CUTLASS among them),
# deps/ (cp312 wheels of what `import sglang` needs), tests/ and ngram-tests/ (SGLang's own test
# files, fetched from sgl-project/sglang), kc-src.tar.gz (`git archive HEAD` of this project).
#   bash benchmarks/sglang_gpu.sh setup|tests|bench     (results under $OUT, default /tmp/sglgpu/out)
# kc-src.tar.gz must hold the commit to measure: `git archive --format=tar.gz -o .device/sgl/kc-src.tar.gz HEAD`.
set -uo pipefail
B=.device/sgl
W=/tmp/sglgpu
OUT=${OUT:-$W/out}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 PYTHONHASHSEED=0
export PYTHONPATH="$W/src:$W/site"
case "${1:-}" in
setup)
  rm -rf "$W/src" "$W/site"; mkdir -p "$W/src" "$W/site"
  tar xzf "$B/kc-src.tar.gz" -C "$W/src"
  # flashinfer-slim.tar.xz: in $B, or where the device preparation keeps it (.device/)
  for t in "$B/sglang-slim.tar.xz" "$(ls "$B/flashinfer-slim.tar.xz" .device/flashinfer-slim.tar.xz 2>/dev/null | head -1)" "$B/cutlass.tar.xz"; do
    tar xJf "$t" -C "$W/site" || { echo "setup: cannot unpack '$t'" >&2; exit 1; }
  done
  python3 -m pip install -q --no-index --no-deps .device/wheels/apache_tvm_ffi-*.whl
  # the KERNELCACHE_PATCH hook (what an installed kernelcache ships) for the benchmark's children
  cp "$W/src/kernelcache/patch/kernelcache-patch.pth" "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
  # only what the machine lacks (an unpinned name an installed version satisfies is skipped)
  python3 -m pip install -q --no-index --find-links "$B/deps" orjson psutil pybase64 pillow starlette \
    msgspec pyzmq ipython aiohttp nvidia-ml-py einops tqdm tabulate packaging requests pydantic
  nvidia-smi -L; python3 -c "import torch, tvm_ffi, sglang, flashinfer, kernelcache
print('torch', torch.__version__, 'tvm_ffi', tvm_ffi.__version__, 'sglang', sglang.__version__, 'flashinfer', flashinfer.__version__, kernelcache.__file__)"
  ;;
tests)
  python3 "$W/src/tests/sglang/upstream_suite.py" "$B/tests" --warm --json "$OUT/jit_tests.json"; echo "jit tests rc=$?"
  python3 "$W/src/tests/sglang/upstream_suite.py" "$B/ngram-tests" --warm --json "$OUT/ngram_tests.json"; echo "ngram tests rc=$?"
  ;;
bench)
  # per module: cold (empty caches) COLD_REPS a side, warm (fresh processes, the route with a fresh
  # SGLANG_JIT_CACHE_DIR each time) REPS a side, warm past the shared floor FLOOR_REPS a side, the
  # route's steps of a recalled call timed one by one STAGES times; the log of each module goes to
  # $OUT too. One module per device call fits its 600 s (BENCH_MODULES=cutlass, then =ngram).
  for m in ${BENCH_MODULES:-cutlass ngram}; do
    rm -rf "$W/bench-$m"
    python3 "$W/src/benchmarks/bench_sglang.py" --module "$m" --reps "${REPS:-11}" --cold-reps "${COLD_REPS:-5}" \
      --floor-reps "${FLOOR_REPS:-5}" --stages "${STAGES:-5}" --dir "$W/bench-$m" 2>&1 | tee "$OUT/bench_sglang_$m.log"
    cp "$W/bench-$m/bench_sglang.json" "$OUT/bench_sglang_$m.json"
  done
  ;;
*) echo "usage: $0 setup|tests|bench" >&2; exit 2 ;;
esac
