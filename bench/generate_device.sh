#!/usr/bin/env bash
# Generation on the GPU machine: exports the Qwen2.5-0.5B-shaped 4-bit decoder
# (bench/export_decoders.py --qwen), then times kiln.generate through Dawn, Deno's WebGPU and wasm
# (16 threads), ONNX Runtime Web's own loop on wasm (16 threads) and webgpu (bench/ort_generate.ts),
# one process each (with the root config: bench/deno.json's lock would fetch the peer libraries),
# and ONNX Runtime's native loop on the CPU (16 threads).
#   source .device/env.sh && bash bench/generate_device.sh "$OUT"
set -uo pipefail
out=${1:?usage: generate_device.sh OUT_DIR}
models=/tmp/kiln-decoders
# A warm machine keeps the export of an earlier call.
[ -e "$models/qwen_shaped.onnx.data" ] ||
  python3 bench/export_decoders.py "$models" --qwen > "$out/export.log" 2>&1
[ -n "${SKIP_ORT:-}" ] || python3 bench/export_decoders.py "$models" --ort-bench \
  "$models/qwen_shaped.onnx" > "$out/ort-cpu.json" 2> "$out/ort-cpu.err"
export KILN_CACHE_DIR=off
model="$models/qwen_shaped.onnx"
args=(--prompt 128 --vocab 151936)
run() { # NAME SCRIPT ARGS...: one process, its JSON line in NAME.json
  local name=$1
  shift
  timeout 200 deno run -A --config deno.json "$@" > "$out/$name.json" 2> "$out/$name.err"
}
KILN_GPU=dawn run kiln-dawn bench/generate.ts "$model" --backends webgpu --new 64 "${args[@]}"
KILN_GPU=navigator run kiln-navigator bench/generate.ts "$model" --backends webgpu --new 32 "${args[@]}"
run kiln-wasm bench/generate.ts "$model" --backends wasm --new 32 "${args[@]}"
run ort-web-wasm bench/ort_generate.ts "$model" --ep wasm --new 32 "${args[@]}"
run ort-web-webgpu bench/ort_generate.ts "$model" --ep webgpu --new 32 "${args[@]}"
tail -n 3 "$out"/*.err
cat "$out"/*.json
