#!/usr/bin/env bash
# Full-size models on the GPU machine: exports them (bench/export_full_models.py: ResNet-50 at
# batch 1 and 8, BERT-base, GPT-2 small, ViT-B/16, random weights) and runs each on kiln's
# webgpu backend under the automatic WebGPU choice, on Deno's WebGPU and on Dawn, and under auto
# placement; one process each, kernel cache off, 20 runs.
#   source .device/env.sh && bash bench/full_models_device.sh "$OUT"
set -euo pipefail
out=${1:?usage: full_models_device.sh OUT_DIR}
models=/tmp/kiln-full-models
python3 bench/export_full_models.py "$models" > "$out/export.log" 2>&1
export KILN_CACHE_DIR=off
for path in "$models"/*.onnx; do
  name=$(basename "$path" .onnx)
  inputs=()
  for f in "$models/$name".in.*.bin; do
    input=$(basename "$f" | cut -d. -f3)
    inputs+=(--input "$input=$f")
  done
  for how in auto navigator dawn; do
    KILN_GPU=$how timeout 240 deno run -A cli/mod.ts run "$path" --backend webgpu "${inputs[@]}" \
      --runs 20 --json > "$out/$name-$how.json" 2> "$out/$name-$how.err" || true
  done
  timeout 240 deno run -A cli/mod.ts run "$path" "${inputs[@]}" --runs 20 --json \
    > "$out/$name-placed.json" 2> "$out/$name-placed.err" || true
done
# One summary (the run's files are many): median and first run, compile, per model and runner.
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(os.listdir(out)):
    if not f.endswith(".json") or f == "summary.json":
        continue
    name, how = f[:-5].rsplit("-", 1)
    try:
        d = json.load(open(os.path.join(out, f)))
        t = d["timings"]
        rows.setdefault(name, {})[how] = {
            "median": t.get("medianRunMs"), "first": t.get("runMs"), "compile": t.get("compileMs"),
            "backend": d.get("backend"),
        }
    except Exception:
        err = open(os.path.join(out, f[:-5] + ".err")).read()[-300:]
        rows.setdefault(name, {})[how] = {"error": err}
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(rows, indent=1))
PY
