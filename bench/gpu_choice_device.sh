#!/usr/bin/env bash
# Which WebGPU the webgpu backend takes unnamed (gpu: "auto"), and what that costs, on the GPU
# machine: `kiln info` shows the implementation auto chose, and each shared model is benched on
# webgpu three ways in processes of their own — auto, Deno's WebGPU (navigator) and Dawn — with
# the kernel cache off. Pack .device first (Deno, the loaders, a Deno cache with npm:webgpu and
# the models in .device/models), then on the device:
#   source .device/env.sh && bash bench/gpu_choice_device.sh "$OUT"
set -euo pipefail
out=${1:?usage: gpu_choice_device.sh OUT_DIR}
export KILN_CACHE_DIR=off
KILN_GPU=auto deno run -A cli/mod.ts info --json > "$out/info-auto.json"
for m in mlp lenet transformer_block shufflenet_v2_x0_5 vit_tiny; do
  for gpu in auto navigator dawn; do
    KILN_GPU=$gpu deno run -A cli/mod.ts bench ".device/models/$m.onnx" --backend webgpu \
      --runs 30 --warmup 5 --json > "$out/$m-$gpu.json" 2> "$out/$m-$gpu.err" || true
  done
done
# auto under the auto policy too: the first run of a fresh process, cache off.
for m in mlp vit_tiny; do
  deno run -A cli/mod.ts run ".device/models/$m.onnx" --json > "$out/$m-run-auto.json" \
    2> "$out/$m-run-auto.err" || true
done
