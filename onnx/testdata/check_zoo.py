# Runs every export of export_zoo.py through kiln's CLI as a user would (`kiln run MODEL --backend B
# --input NAME=FILE --save DIR --json`), compares y with ONNX Runtime's (relative to its largest
# magnitude; the issue's bound is 1e-4) and says where a kernel fell off the backend asked for.
# usage (project root, deno on PATH): python3 onnx/testdata/check_zoo.py ZOO_DIR OUT.json [BACKEND ...]
# (BACKEND auto: its plan may mix wasm and webgpu)
# (ZOO_ONLY=prefix,prefix keeps the models whose names start so; ZOO_JOBS runs at once, default 6)
import json, os, subprocess, sys, tempfile, numpy as np
from concurrent.futures import ThreadPoolExecutor

zoo, report_path = sys.argv[1], sys.argv[2]
backends = sys.argv[3:] or ["wasm", "webgpu"]
meta = {}
for f in sorted(os.listdir(zoo)):
    if f.startswith("zoo") and f.endswith(".json"):
        meta.update({k: v for k, v in json.load(open(f"{zoo}/{f}")).items() if k != "versions"})


def check(tag, backend):
    m = meta[tag]
    args = ["deno", "run", "-A", "cli/mod.ts", "run", f"{zoo}/{tag}.onnx", "--backend", backend, "--json", "--runs", "5"]
    for k, (_, dt) in m["inputs"].items(): args += ["--input", f"{k}={zoo}/{tag}.in.{k}.{dt}.bin"]
    with tempfile.TemporaryDirectory() as d:
        try:
            p = subprocess.run(args + ["--save", d], capture_output=True, text=True, timeout=420,
                               env={**os.environ, "KILN_CACHE_DIR": "off"})
        except subprocess.TimeoutExpired:
            return {"tag": tag, "backend": backend, "error": "timed out after 420 s"}
        if p.returncode != 0:
            return {"tag": tag, "backend": backend, "error": (p.stderr.strip() or p.stdout.strip())[-600:]}
        line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
        run = json.loads(line)
        y = np.fromfile(f"{d}/y.bin", dtype=np.float32)
    ref = np.fromfile(f"{zoo}/{tag}.out.y.float32.bin", dtype=np.float32)
    err = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)) if y.shape == ref.shape else float("inf")
    # Under auto a model runs whole where no kernel falls back to the reference interpreter.
    fast = {"wasm", "webgpu"} if backend == "auto" else {backend}
    off = sorted({k["backend"] for k in run["kernels"]} - fast)
    return {"tag": tag, "backend": backend, "relError": err, "off": off, "kernels": len(run["kernels"]),
            "compileMs": run["timings"]["compileMs"], "medianRunMs": run["timings"]["medianRunMs"]}


only = tuple(p for p in os.environ.get("ZOO_ONLY", "").split(",") if p)
jobs = [(t, b) for t in meta for b in backends if not only or t.startswith(only)]
with ThreadPoolExecutor(int(os.environ.get("ZOO_JOBS", "6"))) as pool:
    results = []
    for r in pool.map(lambda j: check(*j), jobs):
        ok = "error" not in r and r["relError"] <= 1e-4 and not r["off"]
        print(("ok  " if ok else "FAIL"), r["tag"], r["backend"],
              r.get("error", "").replace("\n", " | ")[:400] or
              f"err {r['relError']:.1e} kernels {r['kernels']} off {r['off']} compile {r['compileMs']:.0f} ms run {r['medianRunMs']:.2f} ms",
              flush=True)
        results.append({**r, "ok": ok})
json.dump(results, open(report_path, "w"), indent=1)
print(f"{sum(r['ok'] for r in results)} of {len(results)} ok")
