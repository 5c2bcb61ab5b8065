#!/usr/bin/env bash
# FlashInfer's own tests (a fixed selection) plain and routed, and the model-config start-up benchmark,
# in one call on the lent H200 (benchmarks/RESULTS.md, "Issue 25 (this stop)"). Not part of CI.
#
# Prepare (here): copy this tree to /work/main/.device/wt-flashinfer and add devextra/ with
#   fi-slim.zip   FlashInfer 0.7.4's wheel without CUTLASS headers (fits the 64 MiB carry)
#   wheels/       cp312 wheels: apache-tvm-ffi, einops, nvidia-ml-py, tabulate, tqdm, numpy
#   fi-tests/     FlashInfer's tests/ at fb28d72 (never committed here), its pytest.ini, and
#                 selected.txt (benchmarks/flashinfer_h200_selection.txt)
#   route-hook/sitecustomize.py  the one line of kernelcache-patch.pth (a --target install reads no .pth)
#   run.sh        this file
# Run: `run` with carry [".device/wt-flashinfer"]: cd .device/wt-flashinfer && bash devextra/run.sh
# Everything comes back in $OUT/logs.tgz (+ summary.txt).
set -u
root=$PWD; x=$root/devextra; OUTTOP=${OUT:-/tmp/out}; out=/tmp/fi-out; rm -rf "$out"; mkdir -p "$out" "$OUTTOP"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
site=/tmp/kc-site-fi; rm -rf "$site"; mkdir -p "$site"
whl=$(ls "$x"/wheels/*.whl | grep -v numpy); python3 -c "import numpy" 2>/dev/null || whl="$whl $(ls "$x"/wheels/numpy-*.whl)"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" $whl > "$out/pip.log" 2>&1 || { cat "$out/pip.log"; exit 3; }
python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$x/fi-slim.zip" "$site"
export PYTHONPATH="$root:$site" PATH="$site/bin:$PATH" CUDA_HOME=/usr/local/cuda PYTHONHASHSEED=0 PYTHONUNBUFFERED=1
unset KERNELCACHE_PATCH
{ nvidia-smi -L; uptime; nproc; free -g | head -2; python3 -c "import xdist; print('xdist', xdist.__version__)"; } > "$out/machine.txt" 2>&1
python3 -c "import flashinfer, kernelcache; print(flashinfer.__version__, kernelcache.__file__)" > "$out/import.log" 2>&1 || { cat "$out/import.log"; exit 4; }
echo "setup $(el)s" >> "$out/summary.txt"
ids=$(cat "$x/fi-tests/selected.txt")
TT=${TT:-420}
run_tests() {  # $1 = plain|routed
  local t0=$(date +%s)
  ( cd "$x/fi-tests" && timeout -k 15 "$TT" python3 -m pytest -v -rA -p no:cacheprovider -n 5 --dist loadfile $ids \
      > "$out/$1.log" 2>&1 ); echo "$1 rc=$? $(( $(date +%s) - t0 ))s" >> "$out/summary.txt"
}
# phase 1, all at once: both test sides (fresh workspaces, fresh cache, MAX_JOBS=16) and both cold bench sides
FLASHINFER_WORKSPACE_BASE=/tmp/ws-plain MAX_JOBS=16 FLASHINFER_JIT_BUILD_LOG="$out/plain-fi-builds.jsonl" run_tests plain &
PYTHONPATH="$x/route-hook:$PYTHONPATH" KERNELCACHE_PATCH=flashinfer KERNELCACHE_DIR=/tmp/kc-tests \
  KERNELCACHE_LOG="$out/routed-events.jsonl" FLASHINFER_JIT_BUILD_LOG="$out/routed-fi-builds.jsonl" \
  FLASHINFER_WORKSPACE_BASE=/tmp/ws-route MAX_JOBS=16 run_tests routed &
mkdir -p /tmp/bench
for side in own route; do
  ( t0=$(date +%s); MAX_JOBS=8 timeout -k 15 "${TB:-440}" python3 "$root/benchmarks/bench_flashinfer_startup.py" \
      --phase cold --side $side --dir /tmp/bench > "$out/bench-cold-$side.log" 2>&1
    echo "bench cold $side rc=$? $(( $(date +%s) - t0 ))s" >> "$out/summary.txt" ) &
done
wait
echo "phase 1 done at $(el)s; $(uptime)" >> "$out/summary.txt"
# phase 2 (machine quiet): warm, fresh workspace, fleet, FlashInfer's own cache
left=$(( ${BUDGET:-575} - $(el) ))
if [ -f /tmp/bench/cold-own.json ] && [ -f /tmp/bench/cold-route.json ] && [ $left -gt 40 ]; then
  reps=5; [ $left -lt 110 ] && reps=3
  timeout -k 5 $((left - 5)) python3 "$root/benchmarks/bench_flashinfer_startup.py" --phase warm --dir /tmp/bench --reps $reps \
    > "$out/bench-warm.log" 2>&1; echo "bench warm rc=$? reps=$reps" >> "$out/summary.txt"
fi
cp /tmp/bench/*.json "$out/" 2>/dev/null
for f in plain routed; do
  grep -oE "(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) tests/[^ ]+" "$out/$f.log" | sort -u -k2 > "$out/$f.set"
  echo "$f: $(cut -d' ' -f1 "$out/$f.set" | sort | uniq -c | tr '\n' ' ')" >> "$out/summary.txt"
done
diff <(awk '{print $2, $1}' "$out/plain.set" | sort) <(awk '{print $2, $1}' "$out/routed.set" | sort) > "$out/plain-vs-routed.diff" \
  && echo "same outcome per test id plain/routed" >> "$out/summary.txt"
echo "routed events: build_done=$(grep -c build_done "$out/routed-events.jsonl" 2>/dev/null) hit=$(grep -c '"event": "hit"' "$out/routed-events.jsonl" 2>/dev/null)" >> "$out/summary.txt"
ls /tmp/kc-tests/v1/entries > "$out/routed-entries.txt" 2>&1
find /tmp/ws-route -name "*.so" > "$out/routed-ws-so.txt" 2>&1
find /tmp/ws-plain -name "*.so" > "$out/plain-ws-so.txt" 2>&1
echo "end $(el)s" >> "$out/summary.txt"
tar -czf "$OUTTOP/logs.tgz" -C "$out" . ; cp "$out/summary.txt" "$OUTTOP/"
cat "$out/summary.txt"; tail -40 "$out/bench-warm.log" 2>/dev/null
