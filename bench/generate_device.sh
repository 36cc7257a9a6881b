#!/usr/bin/env bash
# Generation on the GPU machine: exports the Qwen2.5-0.5B-shaped 4-bit decoder
# (bench/export_decoders.py --qwen), then times kiln.generate through Dawn, Deno's WebGPU and wasm
# (16 threads), one process each (with the root config: bench/deno.json's lock would fetch the
# peer libraries), and ONNX Runtime's own loop on the CPU (16 threads).
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
args=(--prompt 128 --new 128 --vocab 151936)
KILN_GPU=dawn timeout 300 deno run -A --config deno.json bench/generate.ts "$model" --backends webgpu "${args[@]}" \
  > "$out/kiln-dawn.json" 2> "$out/kiln-dawn.err"
KILN_GPU=navigator timeout 300 deno run -A --config deno.json bench/generate.ts "$model" --backends webgpu \
  --prompt 128 --new 32 --vocab 151936 > "$out/kiln-navigator.json" 2> "$out/kiln-navigator.err"
timeout 300 deno run -A --config deno.json bench/generate.ts "$model" --backends wasm "${args[@]}" \
  > "$out/kiln-wasm.json" 2> "$out/kiln-wasm.err"
tail -n 3 "$out"/*.err
cat "$out"/*.json
