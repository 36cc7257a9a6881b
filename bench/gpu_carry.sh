#!/usr/bin/env bash
# Replaces .device/deno_dir.tar.xz (made by ../shared/device/prepare.sh) with a Deno cache that
# lets bench/gpu_bench.ts run every peer on the offline GPU machine within the 64 MiB a run can
# carry: `deno cache --no-lock` records every package's registry metadata (a lockfile-based cache
# leaves transitive packages such as @types/long unresolvable with --cached-only), onnxruntime-web
# keeps only the files its `/webgpu` entry loads, and binaryen drops its command-line tools.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .device/env.sh ] || { echo "Run bash ../shared/device/prepare.sh first." >&2; exit 1; }
cache=$(mktemp -d)
entry="$cache/ort_webgpu_entry.ts"
echo 'import "npm:onnxruntime-web@1.30.0/webgpu";' >"$entry"
DENO_DIR="$cache/deno" deno cache --no-lock --quiet --config bench/deno.json mod.ts bench/gpu_bench.ts "$entry"
npm_dir="$cache/deno/npm/registry.npmjs.org"
find "$npm_dir/onnxruntime-web/1.30.0/dist" -type f ! -name 'ort.webgpu.bundle.min.mjs' \
  ! -name 'ort-wasm-simd-threaded.asyncify.*' -delete
rm -rf "$npm_dir"/binaryen/*/bin
tar -C "$cache/deno" -cf - . | xz -T0 -6 >.device/deno_dir.tar.xz
rm -rf "$cache"
du -sh .device
