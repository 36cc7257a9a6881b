#!/usr/bin/env bash
# Full-size models on the GPU machine: exports them (bench/export_full_models.py: ResNet-50 at
# batch 1 and 8, BERT-base, GPT-2 small, ViT-B/16, random weights) and runs each on kiln's
# webgpu backend under the automatic WebGPU choice, on Deno's WebGPU and on Dawn, and under auto
# placement, and with --precision f32 and f16 (f16's error against f32 in the summary); one
# process each, kernel cache off, 20 runs. RUNNERS picks among the WebGPU choices (empty: none)
# (default: auto navigator dawn); the models are exported once per machine.
#   source .device/env.sh && bash bench/full_models_device.sh "$OUT"
set -euo pipefail
out=${1:?usage: full_models_device.sh OUT_DIR}
models=/tmp/kiln-full-models
[ -e "$models/vit_b16.onnx" ] || python3 bench/export_full_models.py "$models" > "$out/export.log" 2>&1
export KILN_CACHE_DIR=off
for path in "$models"/*.onnx; do
  name=$(basename "$path" .onnx)
  inputs=()
  for f in "$models/$name".in.*.bin; do
    input=$(basename "$f" | cut -d. -f3)
    inputs+=(--input "$input=$f")
  done
  for how in ${RUNNERS-auto navigator dawn}; do
    KILN_GPU=$how timeout 240 deno run -A cli/mod.ts run "$path" --backend webgpu "${inputs[@]}" \
      --runs 20 --json > "$out/$name-$how.json" 2> "$out/$name-$how.err" || true
  done
  timeout 240 deno run -A cli/mod.ts run "$path" "${inputs[@]}" --runs 20 --json \
    > "$out/$name-placed.json" 2> "$out/$name-placed.err" || true
  # f16 against f32 on the webgpu backend: time, and the outputs kept to compare.
  for p in f32 f16; do
    timeout 240 deno run -A cli/mod.ts run "$path" --backend webgpu "${inputs[@]}" --runs 20 \
      --precision $p --save "$out/out-$name-$p" --json > "$out/$name-$p.json" 2> "$out/$name-$p.err" || true
  done
done
# One summary (the run's files are many): median and first run, compile, per model and runner.
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(os.listdir(out)):
    if not f.endswith(".json") or f == "summary.json" or f.startswith("out-"):
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
# f16's error: the largest difference from f32's output over f32's largest magnitude.
import numpy as np
for name in rows:
    try:
        index = json.load(open(os.path.join(out, f"out-{name}-f32", "outputs.json")))
        worst = 0.0
        for o, d in index.items():
            read = lambda p: np.fromfile(os.path.join(out, f"out-{name}-{p}", d["file"]), np.float32)
            a, b = read("f32"), read("f16")
            worst = max(worst, float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)))
        rows[name]["f16"]["relativeError"] = worst
    except Exception as e:
        rows[name].setdefault("f16", {})["relativeError"] = str(e)[:200]
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(rows, indent=1))
PY
