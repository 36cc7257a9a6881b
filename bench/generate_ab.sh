#!/usr/bin/env bash
# Decode speed of the working tree against a base tree, in alternating processes of one call to
# the GPU machine: its clock and its host differ from call to call and from process to process by
# up to 2× (bench/REPORT-generate.md, session 81), so only trees timed side by side compare.
# The base is `git archive BASE` packed into .device/base.tar.xz beside the Deno cache (or the
# archive BASE_TAR names):
#   git archive BASE | xz > .device/base.tar.xz          # here, then on the GPU machine:
#   source .device/env.sh && [BACKEND=wasm] [BASE_TAR=…] bash bench/generate_ab.sh [ROUNDS] [--level0]
# The Qwen2.5-0.5B-shaped decoder (bench/export_decoders.py), MatMulNBits of accuracy_level 4 as
# onnxruntime-genai writes its CPU and WebGPU models (`--level0`: without), prompt 128, 128 new
# tokens through Dawn (BACKEND=wasm: on wasm, every core), kernel cache off; one line a process,
# then the medians.
set -uo pipefail
rounds=${1:-4}
level=$([ "${2:-}" = "--level0" ] && echo "" || echo "_level4")
root=$PWD base=/tmp/kiln-base models=/tmp/kiln-decoders
model="$models/qwen_shaped$level.onnx"
rm -rf "$base" && mkdir -p "$base" && xz -dc "${BASE_TAR:-.device/base.tar.xz}" | tar -C "$base" -xf -
[ -e "$model.data" ] || python3 bench/export_decoders.py "$models" \
  "$([ -n "$level" ] && echo --qwen-level4 || echo --qwen)" > /tmp/kiln-export.log 2>&1
export KILN_CACHE_DIR=off KILN_GPU=dawn
backend=${BACKEND:-webgpu}
run() { # TREE NAME: one process, its warm and first decode tokens/s and warm prefill ms
  (cd "$1" && timeout 120 deno run -A --config deno.json bench/generate.ts "$model" \
    --backends "$backend" --new 128 --prompt 128 --vocab 151936 2>/dev/null) |
    python3 -c 'import json, sys
d = json.loads(sys.stdin.read())
print(sys.argv[1], round(d["warm"]["decodeTokensPerSecond"], 1),
      round(d["first"]["decodeTokensPerSecond"], 1), round(d["warm"]["prefillMs"], 1),
      round(d["first"]["prefillMs"]),
      d["warm"]["ids"][-1], (d.get("memory") or {}).get("rssMB", "-"))' "$2"
}
echo "tree warm-decode first-decode warm-prefill-ms first-prefill-ms last-id rss-MB"
for _ in $(seq "$rounds"); do run "$root" tree; run "$base" base; done | tee /tmp/kiln-ab.txt
python3 - <<'PY'
import statistics
rows = [line.split() for line in open("/tmp/kiln-ab.txt")]
for tree in ("tree", "base"):
    mine = [r for r in rows if r[0] == tree]
    if mine:
        print(tree, "medians: warm", statistics.median(float(r[1]) for r in mine),
              "first", statistics.median(float(r[2]) for r in mine))
PY
