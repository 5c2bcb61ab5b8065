#!/usr/bin/env bash
# FlashInfer's batch decode (and a batch prefill slice) tests, plain then routed, on the lent
# H200 (benchmarks/RESULTS.md, issue 25, "batch decode and prefill"). Not part of CI.
#
# Prepared as for flashinfer_h200_tests.sh (devextra/ in .device/wt-flashinfer: fi-slim.zip, wheels/,
# fi-tests/ with FlashInfer's tests at fb28d72 and its pytest.ini, route-hook/sitecustomize.py).
# Run: `run` with carry [".device/wt-flashinfer"]:
#   cd .device/wt-flashinfer && bash benchmarks/flashinfer_h200_attention.sh
#
# Selection (pytest -k, below): test_batch_decode_kernels.py at head dim 128 (kv fp16 and fp8_e4m3,
# pos encoding NONE and ROPE_LLAMA; the paged, fast-plan, tuple and CUDA-graph tests), the two
# extreme-logit cases and the torch.compile single-decode case; test_batch_prefill_kernels.py's
# paged and tuple-paged tests at head dim 128, ROPE_LLAMA (FA2: FA3 takes no RoPE), page 16, batch 12.
# FlashInfer's module prebuilds (the files' `warmup_jit` fixtures: 38 modules, 4 of them FA3; and
# attention/conftest.py's collector prebuild) are turned off on both sides by a small plugin
# written below, so each side compiles only the modules its tests load, lazily, through
# `build_and_load` (FlashInfer's own file lock on one side, the route on the other). Same plugin,
# same ids, same flags on both sides.
set -u
root=$PWD; x=$root/devextra; OUTTOP=${OUT:-/tmp/out}; out=/tmp/fi-attn-out; rm -rf "$out"; mkdir -p "$out" "$OUTTOP"
T0=$(date +%s)
site=/tmp/kc-site-fi; rm -rf "$site"; mkdir -p "$site"
whl=$(ls "$x"/wheels/*.whl | grep -v numpy); python3 -c "import numpy" 2>/dev/null || whl="$whl $(ls "$x"/wheels/numpy-*.whl)"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" $whl > "$out/pip.log" 2>&1 || { cat "$out/pip.log"; exit 3; }
python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$x/fi-slim.zip" "$site"
export PYTHONPATH="$root:$site" PATH="$site/bin:$PATH" CUDA_HOME=/usr/local/cuda PYTHONHASHSEED=0 PYTHONUNBUFFERED=1
unset KERNELCACHE_PATCH
plug=/tmp/fi-attn-plugin; rm -rf "$plug"; mkdir -p "$plug"
cat > "$plug/fi_noprebuild.py" <<'EOF'
"""FlashInfer's test prebuilds off: each module compiles when a test first loads it."""


def _no_prebuild(*args, **kwargs):
    return None


def pytest_configure(config):
    import flashinfer.jit
    import flashinfer.jit.core

    flashinfer.jit.build_jit_specs = _no_prebuild
    flashinfer.jit.core.build_jit_specs = _no_prebuild
EOF
{ nvidia-smi -L; uptime; nproc; python3 -c "import pytest, xdist; print('pytest', pytest.__version__, 'xdist', xdist.__version__)"; } > "$out/machine.txt" 2>&1
python3 -c "import flashinfer, kernelcache; print(flashinfer.__version__, kernelcache.__file__)" > "$out/import.log" 2>&1 || { cat "$out/import.log"; exit 4; }
echo "setup $(( $(date +%s) - T0 ))s" >> "$out/summary.txt"
KD='test_batch_decode_kernels and (True-0.0-NONE-NHD-128- or True-0.0-ROPE_LLAMA-NHD-128- or q_dtype0-NONE-NHD-128- or q_dtype0-ROPE_LLAMA-NHD-128- or extreme_negative or test_single_decode_torch_compile_cuda_graph) and not nvfp4'
KP='paged_kv_cache[True-True-0.0 and ROPE_LLAMA-NHD and (128-4-4-16- or 128-32-4-16-) and 12] and not custom_mask'
[ "${PREFILL:-1}" = 1 ] || KP='nothing_selected_here'
echo "decode -k: $KD" >> "$out/summary.txt"; echo "prefill -k: $KP" >> "$out/summary.txt"
TT=${TT:-480}
run_tests() {  # $1 = plain|routed
  local t0=$(date +%s)
  ( cd "$x/fi-tests" && PYTHONPATH="$plug:$PYTHONPATH" timeout -k 15 "$TT" python3 -m pytest -v -rA -p no:cacheprovider \
      -p fi_noprebuild -n "${NW:-6}" --dist load -k "($KD) or ($KP)" \
      tests/attention/test_batch_decode_kernels.py tests/attention/test_batch_prefill_kernels.py \
      > "$out/$1.log" 2>&1 ); echo "$1 rc=$? $(( $(date +%s) - t0 ))s" >> "$out/summary.txt"
}
# One side after the other (SEQ=1, the default): with both at once, 12 workers' caching allocators
# (~16 GB each after the 16384-token cases) filled the GPU and FlashInfer's conftest turned a
# different set of tests into "Skipping due to OOM" on each side.
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
bg=; [ "${SEQ:-1}" = 1 ] || bg='&'
eval "FLASHINFER_WORKSPACE_BASE=/tmp/ws-plain MAX_JOBS=16 run_tests plain $bg"
eval "PYTHONPATH=\"$x/route-hook:$PYTHONPATH\" KERNELCACHE_PATCH=flashinfer KERNELCACHE_DIR=/tmp/kc-attn \
  KERNELCACHE_LOG=\"$out/routed-events.jsonl\" FLASHINFER_WORKSPACE_BASE=/tmp/ws-route MAX_JOBS=16 run_tests routed $bg"
wait
echo "tests done at $(( $(date +%s) - T0 ))s; $(uptime)" >> "$out/summary.txt"
for f in plain routed; do
  grep -oE "(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) tests/[^ ]+" "$out/$f.log" | sort -u -k2 > "$out/$f.set"
  echo "$f: $(cut -d' ' -f1 "$out/$f.set" | sort | uniq -c | tr '\n' ' ')" >> "$out/summary.txt"
  grep -E "^=+ .* in [0-9.]+s" "$out/$f.log" | tail -1 >> "$out/summary.txt"
  grep -E "^SKIPPED \[" "$out/$f.log" >> "$out/summary.txt"
done
diff <(awk '{print $2, $1}' "$out/plain.set" | sort) <(awk '{print $2, $1}' "$out/routed.set" | sort) > "$out/plain-vs-routed.diff" \
  && echo "same outcome per test id plain/routed" >> "$out/summary.txt"
echo "routed events: build_done=$(grep -c build_done "$out/routed-events.jsonl" 2>/dev/null) hit=$(grep -c '"event": "hit"' "$out/routed-events.jsonl" 2>/dev/null)" >> "$out/summary.txt"
ls /tmp/kc-attn/v1/entries > "$out/routed-entries.txt" 2>&1
find /tmp/ws-route -name "*.so" > "$out/routed-ws-so.txt" 2>&1
find /tmp/ws-plain -name "*.so" > "$out/plain-ws-so.txt" 2>&1
echo "plain .so: $(wc -l < "$out/plain-ws-so.txt"), routed .so in FlashInfer's workspace: $(wc -l < "$out/routed-ws-so.txt"), routed entries: $(grep -vc '^ls:' "$out/routed-entries.txt")" >> "$out/summary.txt"
echo "end $(( $(date +%s) - T0 ))s" >> "$out/summary.txt"
tar -czf "$OUTTOP/logs.tgz" -C "$out" . ; cp "$out/summary.txt" "$out/plain-vs-routed.diff" "$OUTTOP/"
cat "$out/summary.txt"; head -20 "$out/plain-vs-routed.diff"
for f in plain routed; do grep -E "^(FAILED|ERROR) " "$out/$f.log" | head -5; tail -3 "$out/$f.log"; done
