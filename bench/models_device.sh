#!/usr/bin/env bash
# Packs .device/ for the models benchmark on the GPU machine (bench/models.ts): the shared
# prepare.sh, then the Deno cache again without what the benchmark never loads (ONNX Runtime
# Web's source maps and its jspi/webgl/"all" builds, binaryen's command-line tools), which
# keeps the carried tree under the device's 64 MiB. Its JSEP build stays: the webgpu runner
# loads it (3.8 MB compressed). Dawn's Linux binary goes too (4.9 MB compressed). On the device:
#   source .device/env.sh && KILN_MODELS_DIR=.device/models/ deno run -A bench/models.ts \
#     --machine NAME --out $OUT/models-NAME.json
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/device/prepare.sh bench/models.ts mod.ts
cache=$(mktemp -d)
# With the root config, as the device scripts run (its unlocked resolution reads the packages'
# registry metadata, which a locked cache lacks), and the generation peers' loop too.
DENO_DIR="$cache" deno cache --quiet --config deno.json bench/models.ts bench/ort_generate.ts mod.ts
# Dawn for `--gpu dawn` (kiln loads it by a computed import, which deno cache cannot see), with
# only the Linux x64 binary of the package's five (21 of its 51 MB).
DENO_DIR="$cache" deno cache --quiet npm:webgpu@0.6.2
find "$cache" -type d -path '*webgpu/0.6.2/dist/*' ! -name 'linux-x64' -prune -exec rm -rf {} +
ort=$(find "$cache" -type d -path '*onnxruntime-web/*/dist' | head -1)
find "$ort" -type f \( -name '*.map' -o -name '*jspi*' -o -name '*webgl*' \
  -o \( -name '*jsep*' -a ! -name 'ort-wasm-simd-threaded.jsep.*' \) \
  -o -name 'ort.all*' -o -name 'ort.js' -o -name 'ort.mjs' -o -name 'ort.min.*' -o -name 'ort.wasm.*' \
  -o -name 'ort.webgpu.js' -o -name 'ort.webgpu.mjs' -o -name 'ort.webgpu.min.*' -o -name 'ort.bundle*' \
  -o -name 'ort.node.min.js' \) -delete
tar -C "$cache" --exclude='binaryen/*/bin' -cf - . | xz -T0 -6 > .device/deno_dir.tar.xz
rm -rf "$cache"
du -sh .device | cut -f1 | xargs echo ".device/ for the models benchmark, size:"
# ../shared does not travel: the models go along in .device (KILN_MODELS_DIR=.device/models/).
rm -rf .device/models && cp -r ../shared/models .device/models
du -sh .device | cut -f1 | xargs echo ".device/ with the models, size:"
