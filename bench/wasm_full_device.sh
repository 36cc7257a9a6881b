#!/usr/bin/env bash
# Issue 52's full-size table on the GPU machine's CPU: ResNet-50 (batch 1 and 8), BERT-base,
# GPT-2 small (with its logits, and GPT2Model without), ViT-B/16 (bench/export_full_models.py)
# and BERT-base dynamic int8 and ResNet-50 QDQ (bench/export_quant_models.py; their f32 forms are
# the first two, which plan alike), each on kiln wasm (`kiln bench`),
# ONNX Runtime Web wasm (bench/ort_run.ts) and ONNX Runtime native CPU (Python), one process a
# runner, alternating rounds; on all cores and on two of them (taskset, two threads). Prints one
# line a run and a table of medians over the rounds. Kernel cache off. .device from
# bench/models_device.sh.
#   source .device/env.sh && bash bench/wasm_full_device.sh [ROUNDS] [CORES ...]   (default: 2, 16 2)
#   MODELS="bert_base gpt2_small" restricts the models.
set -uo pipefail
rounds=${1:-2}
shift || true
cores=${*:-"$(nproc) 2"}
full=/tmp/kiln-full-models quant=/tmp/kiln-quant
models=${MODELS:-"resnet50_b1 resnet50_b8 bert_base gpt2_small gpt2_small_hidden vit_b16 quant/bert_base_int8 quant/resnet50_qdq"}
[ -e "$full/gpt2_small_hidden.onnx" ] || python3 bench/export_full_models.py "$full" > /tmp/kiln-full-export.log 2>&1
# The quantized exports (minutes of calibration) only where a quantized model is asked for.
case " $models" in *" quant/"*)
  [ -e "$quant/models.json" ] || python3 bench/export_quant_models.py "$quant" > /tmp/kiln-quant-export.log 2>&1 ;;
esac
export KILN_CACHE_DIR=off
log=$(mktemp)

path_of() { case $1 in quant/*) echo "$quant/${1#quant/}.onnx" ;; *) echo "$full/$1.onnx" ;; esac; }
inputs_of() {
  local p=${1%.onnx} f
  for f in "$p".in.*.bin; do echo "--input $(basename "$f" | cut -d. -f3)=$f"; done
}
# One timed run of a runner: prints "model runner cores median_ms".
run_one() {
  local model=$1 runner=$2 c=$3 path inputs pin=()
  path=$(path_of "$model")
  inputs=$(inputs_of "$path")
  [ "$c" -lt "$(nproc)" ] && pin=(taskset -c "0-$((c - 1))")
  local ms
  case $runner in
    kiln) ms=$(timeout 300 "${pin[@]}" deno run -A --config deno.json cli/mod.ts bench "$path" \
      --backends wasm --threads "$c" --warmup 3 --runs 10 --json $inputs 2>/dev/null |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["medianMs"])') ;;
    ort-web) ms=$(timeout 300 "${pin[@]}" deno run -A --config deno.json bench/ort_run.ts \
      "$path" --threads "$c" --runs 10 $inputs 2>/dev/null |
      python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median"], 1))') ;;
    ort-native) ms=$(timeout 300 "${pin[@]}" python3 - "$path" "$c" $inputs <<'PY'
import os, statistics, sys, time
import numpy as np, onnxruntime as ort
path, threads, feeds = sys.argv[1], int(sys.argv[2]), {}
o = ort.SessionOptions(); o.intra_op_num_threads = threads
s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
shapes = {i.name: i.shape for i in s.get_inputs()}
for a in sys.argv[3:]:
    if a == "--input": continue
    name, f = a.split("=")
    feeds[name] = np.fromfile(f, f.split(".")[-2]).reshape(shapes[name])
for _ in range(3): s.run(None, feeds)
t = []
for _ in range(10):
    t0 = time.perf_counter(); s.run(None, feeds); t.append((time.perf_counter() - t0) * 1e3)
print(round(statistics.median(t), 2))
PY
    ) ;;
  esac
  echo "$model $runner $c ${ms:-failed}" | tee -a "$log"
}
for c in $cores; do
  for model in $models; do
    for _ in $(seq "$rounds"); do
      for runner in kiln ort-web; do run_one "$model" "$runner" "$c"; done
    done
    run_one "$model" ort-native "$c"
  done
done
# The table: medians over the rounds, kiln ÷ ORT-web and kiln ÷ ORT native.
python3 - "$log" <<'PY'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    model, runner, cores, ms = line.split()
    if ms != "failed":
        cells.setdefault((model, cores), {}).setdefault(runner, []).append(float(ms))
print("| model | cores | kiln wasm | ORT-web wasm | kiln ÷ ORT-web | ORT native | kiln ÷ native |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for (model, cores), r in cells.items():
    med = {k: statistics.median(v) for k, v in r.items()}
    k, w, n = med.get("kiln"), med.get("ort-web"), med.get("ort-native")
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "—"
    show = lambda k: ", ".join(f"{x:g}" for x in r.get(k, [])) or "—"
    print(f"| {model} | {cores} | {show('kiln')} | {show('ort-web')} | {ratio(k, w)} | {show('ort-native')} | {ratio(k, n)} |")
PY
