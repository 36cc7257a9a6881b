#!/usr/bin/env bash
# Quantized models on the GPU machine: exports BERT-base (f32 and dynamic int8) and ResNet-50
# (f32 and static QDQ int8) with bench/export_quant_models.py, then times kiln wasm (16 threads),
# ONNX Runtime Web wasm and kiln webgpu through Dawn on each (bench/models.ts, one process per
# model and runner, outputs checked against ONNX Runtime CPU's), after checking the products over
# bytes that run on the matrix units against the reference to the bit (bench/byte_matrices_check.ts).
# .device from bench/models_device.sh.
#   source .device/env.sh && bash bench/quant_device.sh "$OUT" [--small]
set -uo pipefail
out=${1:?usage: quant_device.sh OUT_DIR [--small]}
models=/tmp/kiln-quant
if [ "${2:-}" = "--small" ]; then
  python3 bench/export_quant_models.py "$out/testdata" --small > "$out/export-small.log" 2>&1
  tail -n 5 "$out/export-small.log"
  exit
fi
KILN_CACHE_DIR=$(mktemp -d) timeout 300 deno run -A --config deno.json bench/byte_matrices_check.ts \
  2> "$out/byte_matrices.err" | tail -n 12
# A warm machine keeps the export of an earlier call.
[ -e "$models/models.json" ] ||
  python3 bench/export_quant_models.py "$models" > "$out/export.log" 2>&1
tail -n 4 "$out/export.log" 2>/dev/null
KILN_EXPORTS_DIR=$models/ timeout 500 deno run -A --config deno.json bench/models.ts \
  --machine h200-quant --runners "${RUNNERS:-kiln-wasm,ort-wasm,kiln-webgpu}" --gpu dawn \
  --models bert_base,bert_base_int8,resnet50,resnet50_qdq --out "$out/quant-h200.json" \
  2> "$out/models.err" | tail -n 30
tail -n 5 "$out/models.err"
