/**
 * The models benchmark's report (`bench/REPORT-models.md`): a table per machine of
 * `bench/results/models-*.json`, one per file of `bench/results/zoo-*.json` (the library architectures), what
 * they measured and what changed for them, and a chart of kiln wasm ÷ ORT wasm. The result
 * files' format is here too; `bench/models.ts` measures and writes them.
 *
 * @module
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { TARGETS } from "./models_notes.ts";

const HERE = new URL(".", import.meta.url).pathname;
/** Where the measurements live. */
const RESULTS = `${HERE}results/`;

/**
 * The runners, each library on one backend; `kiln-warm` is kiln wasm in a process whose kernel
 * cache an earlier process filled (its first run is the one of interest).
 */
export const RUNNERS = [
  "kiln-wasm",
  "kiln-webgpu",
  "kiln-auto",
  "ort-wasm",
  "ort-webgpu",
  "kiln-warm",
] as const;
/** One runner. */
export type Runner = typeof RUNNERS[number];

/** A WebGPU implementation kiln can run on (see `WebGpuOptions.gpu`). */
export type WebGpuImpl = "navigator" | "dawn";

/** One model on one runner. */
export interface ModelResult {
  readonly model: string;
  readonly runner: Runner;
  /** Load, compile and first result, in ms. */
  readonly firstMs?: number;
  /** Median of the timed runs, in ms. */
  readonly medianMs?: number;
  /** 90th percentile of the timed runs, in ms. */
  readonly p90Ms?: number;
  /** Timed runs. */
  readonly runs?: number;
  /** Largest |output − ONNX Runtime's| over the largest |ONNX Runtime's|. */
  readonly relError?: number;
  /** Why it did not run. */
  readonly error?: string;
  /** kiln's runners: kernels a backend in the plan, as `wasm 3` or `wasm 10 + webgpu 2`. */
  readonly placement?: string;
}

/** A benchmark file: one machine's results. */
export interface Results {
  readonly machine: string;
  readonly cpu: string;
  readonly cores: number;
  readonly gpu?: string;
  /** kiln's WebGPU implementation (`KILN_GPU`); absent: `navigator` (Deno's own). */
  readonly webgpu?: WebGpuImpl;
  readonly date: string;
  readonly results: ModelResult[];
}

const fmt = (ms: number | undefined) =>
  ms === undefined ? "—" : ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2);

/**
 * The library architectures of `onnx/testdata/export_zoo.py` (`bench/results/zoo-*.json`: this
 * benchmark's kiln wasm and ORT wasm runners over `KILN_EXPORTS_DIR`), a table per file.
 */
function zooSection(): string[] {
  const files = readdirSync(RESULTS).filter((f) => /^zoo-.+\.json$/.test(f)).sort();
  const lines: string[] = files.length ? ["## Library architectures", "", ...ZOO_TEXT, ""] : [];
  for (const f of files) {
    const r: Results = JSON.parse(readFileSync(`${RESULTS}${f}`, "utf8"));
    const get = (m: string, runner: Runner) =>
      r.results.find((x) => x.model === m && x.runner === runner);
    // The WebGPU columns where the file has them.
    const gpu = r.results.some((x) => x.runner === "kiln-webgpu");
    const auto = gpu && r.results.some((x) => x.runner === "kiln-auto");
    lines.push(
      `### ${r.machine}, ${r.cores} cores (${r.cpu}), ${r.date} (\`bench/results/${f}\`)`,
      "",
      `| model | kiln wasm | ORT wasm | wasm ÷ ORT wasm | first run kiln wasm / ORT wasm |${
        gpu ? " kiln webgpu | ORT webgpu | webgpu ÷ ORT webgpu |" : ""
      }${auto ? " kiln auto | auto ÷ best kiln |" : ""} max rel. error (kiln) |`,
      `| --- | ---: | ---: | ---: | ---: |${gpu ? " ---: | ---: | ---: |" : ""}${
        auto ? " ---: | ---: |" : ""
      } ---: |`,
    );
    for (const m of [...new Set(r.results.map((x) => x.model))]) {
      const k = get(m, "kiln-wasm"), o = get(m, "ort-wasm");
      const kg = get(m, "kiln-webgpu"), og = get(m, "ort-webgpu"), ka = get(m, "kiln-auto");
      const best = Math.min(...[k, kg].flatMap((x) => x?.medianMs ?? []));
      const ratio = (a?: number, b?: number) => (a && b ? (a / b).toFixed(2) : "—");
      const error = Math.max(...[k, kg].flatMap((x) => x?.relError ?? []));
      lines.push(
        `| ${m} | ${fmt(k?.medianMs)} | ${fmt(o?.medianMs)} | ${
          ratio(k?.medianMs, o?.medianMs)
        } | ${fmt(k?.firstMs)} / ${fmt(o?.firstMs)} |${
          gpu
            ? ` ${fmt(kg?.medianMs)} | ${fmt(og?.medianMs)} | ${
              ratio(kg?.medianMs, og?.medianMs)
            } |`
            : ""
        }${auto ? ` ${fmt(ka?.medianMs)} | ${ratio(ka?.medianMs, best)} |` : ""} ${
          Number.isFinite(error) ? error.toExponential(1) : "—"
        } |`,
      );
    }
    lines.push("", "Times in ms (median of 20 runs, one process each).", "");
  }
  return lines;
}

/** What the zoo tables measured, and what changed for them. */
const ZOO_TEXT = [
  "Real library architectures as a new user exports them (`onnx/testdata/export_zoo.py`, run on",
  "the GPU machine: torchvision, timm and Hugging Face configurations at tiny sizes, random",
  "weights, BatchNorm statistics calibrated on random batches; TorchScript at opset 17, twelve",
  "of them through the dynamo exporter too), checked by `onnx/testdata/check_zoo.py`, which",
  "runs each through `kiln run --backend B --input … --save` as the issue's harness does. First",
  "round (codegen wasm 0.6.16, H200 host): 92 of 94 runs (47 exports × wasm, webgpu) within 1e-4",
  "of ONNX Runtime, every kernel on the backend asked for (errors 1.9e-7 to 2.9e-6); torchvision's",
  "Swin was refused (its slice start −INT64_MAX; now saturated as INT64_MIN was, and Swin runs on",
  "both backends within 1.2e-6); `vit_b_16` and the Whisper encoder failed to export. After the",
  "fixes below all 47 ran on wasm within 1e-4 again, and the 17 re-exported with the last code",
  "(0025fff) on wasm and webgpu, 34 of 34. That round also showed three CNNs far behind ONNX",
  "Runtime on wasm, each a path that fell to kiln's per-element code (0.2–0.4 GFLOP/s against",
  "25–30 for the tiled GEMM): ResNet-18 4.4 s a run (its 3×3 convs at 56×56 and its stem had patch",
  "matrices past the 4 MB packing limit, so A was not packed; now packed a block of rows at a",
  "time), RegNet-Y 400MF 163 ms against ORT's 64 (grouped convs: B changes with the group; now a",
  "set of panels per batch of B, which attention's batched matmuls take too) and ConvNeXt-T 176",
  "against 72 (7×7 depthwise convs past the 5×5 window limit; now up to 11×11). Per kernel on one",
  "thread of the 2-core VM: a 56×56 3×3 conv 1229 -> 18.5 ms, RegNet's 3×3 group convs 93 -> 1.9",
  "ms, ConvNeXt's depthwise 116 -> 2.9 ms. The table `zoo-16core.json` is after those fixes (code of 6cbbfb4,",
  "16-core host of the H100): kiln wasm ≤ ORT wasm on 30 of 31 (0.20–0.84), Swin-T 1.73×.",
  "",
  "First runs of the larger CNNs were behind ORT's (ResNet-18 3.0 s against 1.3 s, DenseNet-121",
  "3.3 against 1.6). Three changes after that table: no warm-up for a program whose one",
  "unoptimized run would outlast it (it was one single-threaded run on zeros); the convolutions'",
  "indirection tables built over several calls, so V8 optimizes the builder between them; and",
  "the tables factored into taps (a row's kernel points, each an address and a mask; its channels",
  "a fixed stride apart): ResNet-18's 20M entries became 0.5M. ResNet-18 on the 2-core VM: compile",
  "1.9–2.3 s -> 0.59–0.63 s, first run 0.46–0.67 s (after the warm-up) -> 0.37–0.43 s; the",
  "gather runs as fast as before. The table `zoo-h200-16core.json` (code of 0025fff):",
  "first run ≤ ORT's on 3 of 9 (ResNet-18 1.32 s against 1.58, was 2.22 against 1.79 the same",
  "day; SqueezeNet; ConvNeXt-T 1.754/1.755), 1.03–1.08 on five (RegNet 1.51/1.46, GoogLeNet",
  "1.65/1.58, ResNet-50 1.75/1.64, EfficientNet-B0 1.62/1.50), DenseNet-121 1.48 (2.39/1.61 s:",
  "214 kernels to generate) and Swin-T 2.3 (6.7/2.9 s).",
  "",
  "Swin-T was 1.83× ORT's run on that host. Profiled on a smaller torchvision Swin (embed 48,",
  "depths 2-2, one thread on the 2-core VM): its shifted windows' scores Q·Kᵀ took the i-k-j",
  "loop, evaluating the strided Kᵀ's index map at every multiply-add (0.35 GFLOP/s), because",
  "their epilogue adds a mask through a reshape that splits the batch axis, which the tiled",
  "GEMM's epilogue walk refused; it now takes the tiled GEMM and evaluates such an epilogue point",
  "by point from the tile's accumulators (0e0f3f9; the small Swin's kernels 92 -> 54 ms). Swin-T",
  "then (`zoo-h200-16core-swin.json`): 197 against ORT's 189 ms (1.04×), first run 2.76 against",
  "2.17 s; all 14 exports of that round within 1e-4 on wasm and webgpu. What remains there: its",
  "P·V runs the tiled GEMM at 8.8 ms in the small model against 0.30 ms for the same kernel IR on",
  "uniform inputs, since the masked softmax weights (exp of −100) are denormal floats, which x86",
  "multiplies slowly and WebAssembly may not flush; and its MLPs run at 42 GFLOP/s on 16 threads.",
  "",
  "Export variants (`onnx/testdata/export_variants.py`, 2026-11-26, H200 host, checked by",
  "`check_zoo.py` on wasm and webgpu: `bench/results/check-variants-h200-16core.json`): six of the zoo's",
  "models (ResNet-18, MobileNet-V3-small, timm ViT-tiny, BERT, GPT-2, T5 encoder) as",
  "`torch.onnx.export`'s defaults leave them (the dynamo exporter at opset 20, weights in",
  "`MODEL.onnx.data` beside the model, which kiln refused before 1552eb9 and now reads), through",
  "TorchScript at opsets 11, 13, 15, 18 and 20 (ResNet-18; ViT and BERT from 15, where PyTorch",
  "exports their attention), and with a symbolic batch axis: 46 of 46 runs within 1e-4 of ONNX",
  "Runtime (1.6e-6 at most), every kernel on the backend asked for.",
  "",
  "WebGPU on the library CNNs (`bench/gpu_model_time.ts`, H200, device time a run, the code",
  "before and after in the same call, warm): their convolutions' patch gathers computed each",
  "element's source index as seven integer divisions of one flattened index. With reshape",
  "coordinates simplified as mixed radices allow (a6997a8; two divisions of small coordinates",
  "there) ResNet-18 took 12.30 -> 6.65 ms, EfficientNet-B0 3.84 -> 2.57, RegNet-Y 400MF 4.66 ->",
  "2.76, timm ViT-tiny 6.60 -> 6.11 and DenseNet-121 7.65 (10.7 to 18.1 before, as the clock",
  "varied). Deno's WGSL module creation grows with the code: the patch fill as a loop over a",
  "vec4's lanes (6d81de2) and the shorter index code took ResNet-18's WebGPU compile with the",
  "driver's shader cache warm from 0.94-0.97 to 0.54 s. A model's first compile on a machine",
  "(the driver's cache cold) is the NVIDIA driver's: DenseNet-121 20-27 s, ResNet-18 9-13 s,",
  "0.4-0.9 s a convolution kernel, about the same with either form of the fill.",
  "",
  "Against ONNX Runtime Web on both backends (`zoo-h200-16core-webgpu.json`, code of 3ab81f5,",
  "eight library models, one process each): kiln webgpu ≤ 0.5× ORT webgpu on seven (0.25–0.43:",
  "ResNet-18 26.7 against 62.4 ms end to end, DenseNet-121 24.5 against 60.2, BERT 12.7 against",
  "42.1), ConvNeXt-T 0.53; kiln wasm 0.23–0.87× ORT wasm on all eight; first runs on wasm ≤",
  "ORT's on five (0.78–0.99; EfficientNet-B0 and MobileNet-V2 1.03, DenseNet-121 1.52). Since",
  "c7db50b a run's kernels share one compute pass (3ab81f5; same call, driver cache warm:",
  "DenseNet-121 43.1 -> 33.1 ms, ConvNeXt-T 22.0 -> 18.8, ViT-tiny 23.0 -> 20.2). End-to-end",
  "WebGPU times move in steps of Deno's 10 ms map polling (ResNet-18 19.5 ms in one call, 26.7",
  "in the next, same code). First runs on webgpu are the NVIDIA driver's where a model is",
  "compiled on a machine for the first time: 1.4–3.5× ORT's for the CNNs (ResNet-18 5.3 s",
  "against 3.0, each of kiln's kernels, specialised to its shapes and unrolled, 0.4–0.9 s in",
  "the driver, ONNX Runtime's fewer shape-generic shaders less); with the driver's cache warm",
  "(DenseNet-121 here, profiled in an earlier call) 3.4 s against ORT's 4.9. kiln auto (same",
  "code, the next call, on a machine whose driver cache was cold again): within 10% of the",
  "faster of kiln wasm and kiln webgpu on six of eight (0.92–1.05), not on DenseNet-121 (1.61:",
  "39.5 ms, about wasm's time, against webgpu's 24.5) and ViT-tiny (1.43: 27.6 against 19.3);",
  "its first runs (12–21 s on the CNNs) paid the driver's first compile of every GPU kernel,",
  "since auto prepares both backends.",
  "",
  "Why auto missed there (2026-11-26, evening, H200 host, a fresh kernel cache per model, the",
  "stored notes read back): the WebGPU backend's profile included its readback time, measured",
  "anew in every process, so the keys of its calibrated rates, its placement verdicts and its",
  "cached kernels changed from one process to the next (7e32189 keys them without it: a second",
  "process now reuses all three). Its calibration timed one end-to-end run of a 64K stream and",
  "a 64×64 matmul, which is the ~11 ms readback: the rates came out as the clamp (524 TB/s) in",
  "most processes and as 2 GB/s and 2 GFLOP/s in one, where a second process put ResNet-18 on",
  "wasm without a trial (57.0 ms against the GPU's 31.1). The GPU's rates now come from",
  "repetitions of growing probes in one submission (55ebaf5: 0.9–2.4 TB/s and 1.3–14.7",
  "TFLOP/s in five processes), and an estimate that keeps everything on the host is timed",
  "against the device's plan as the reverse already was. A copy from the GPU back to the host",
  "now costs the estimate the device's sync (a readback), where it was counted once a run: the",
  "estimate had chosen for DenseNet-121 a plan crossing back and forth that ran 2.7 s against",
  "wasm's 44 ms, and its trial timed that plan five times; a plan 4× slower than a round's",
  "fastest is now dropped after that round (bbd19c0; DenseNet-121's auto first run 43.3 ->",
  "35.6 s, most of it the NVIDIA driver's first compile of both plans).",
  "",
  "`zoo-h200-16core-auto.json` (code of bbd19c0, kiln's three runners in one call, one process",
  "each): auto put every model where the faster kiln backend is, on the GPU for all but BERT",
  "(auto 0.88 ms, wasm 0.92), and DenseNet-121 ran 0.89× of the faster (29.8 ms against webgpu's",
  "33.5 in that call). On the other six auto's process took 1.31–1.54× of the webgpu runner's",
  "(ResNet-18 26.7 against 19.4 ms, ConvNeXt-T 27.5 against 17.9) with the same kernels (23 and",
  "97, all on webgpu). Where that goes, measured on the H200 host by wrapping the WebGPU calls",
  "of a run (`.device` scripts, 2026-11-26): encoding and submitting take 0.8 ms (ResNet-18) and",
  "1.6 ms (ConvNeXt-T), the copy out 0.1–0.2 ms, and the rest is the one `mapAsync`: Deno's",
  "waits for the device to finish, then sleeps 10 ms (`ext/webgpu/buffer.rs`), so a run is",
  "10 ms plus the GPU's span. The span moves with the GPU's clocks, which drop under this light,",
  "gapped load (1005 MHz of 1980 read after such runs): in one process, same executable,",
  "timestamp queries, ConvNeXt-T's summed kernel time went 5.1 -> 7.8 -> 8.7 ms over three sets",
  "of runs (end to end 22.1 -> 24.8 -> 25.5) and ResNet-18's 6.6 -> 7.7; the first 20 runs after",
  "compile on a fresh machine took 27–30 ms and the next 20 21.7–22.5. Auto's process ran the",
  "host plan for seconds in its trial while the GPU idled, so it starts its timed runs at lower",
  "clocks; the placement itself is the webgpu runner's. Acquiring the GPU does not slow wasm",
  "(shufflenet 4.0–4.7 ms, vit_tiny 1.15–1.37, alternating with and without it held).",
  "",
  "Matmuls of few tiles on the GPU (e59b0d1, 88bb6d7). Timed per kernel (timestamp queries),",
  "ResNet-18's late convolutions (98 or 392 rows of patches, K = 2304 or 4608) had made 16–28",
  "tiles of 64×64 on a GPU of 132 SMs, or too few to tile at all, and ran at 0.4–0.5 TFLOP/s",
  "(0.6–1.2 ms each); ConvNeXt-T's MLPs over [2, 4, 4, 768] were 8 products of 4 rows, each in",
  "a 64-row tile. The tiler now has 32×64 and 32×32 tiles, folds a batch over shared weights",
  "into rows of one product (on the GPU only: folded in the IR for every backend,",
  "transformer_block's wasm MLPs took 0.89 ms a run against 0.66 in one A/B on the 2-core VM,",
  "medians of 3 processes), and splits K among up to",
  "four slices of a workgroup where the tiles still cannot fill the GPU. Device time a run, same",
  "call, old and new alternating: ResNet-18 6.62 -> 4.98 (tiles) -> 2.20 ms (fold and slices),",
  "ConvNeXt-T 5.03 -> 4.13 -> 1.83, EfficientNet-B0 2.71 -> 2.01, ViT-tiny 2.99 -> 2.87; end",
  "to end ResNet-18 17.3 -> 14.4–14.6 ms, ConvNeXt-T 16.8–17.4 -> 14.6.",
  "`zoo-h200-16core-webgpu-88bb6d7.json` (kiln webgpu and ORT webgpu only, one process each,",
  "a fresh machine): kiln webgpu ≤ 0.5× ORT webgpu on all eight, 0.23–0.43 (ConvNeXt-T 14.7",
  "against 53.6 ms, 0.27, where it was 0.53; ResNet-18 0.24; DenseNet-121 0.43). First runs",
  "there were the NVIDIA driver's first compile of each kernel: 0.9–14.5 s against ORT's",
  "1.7–5.2 s. kiln's three runners again after them (`zoo-h200-16core-auto-853b6d6.json`, one",
  "call, the driver's cache warm): auto within 10% of the faster kiln backend on five of eight",
  "(ResNet-18 1.07, DenseNet-121 0.94, ViT-tiny 1.02, ConvNeXt-T 1.04, BERT 0.97), MobileNet-V2",
  "1.10, EfficientNet-B0 1.19 and RegNet-Y 1.25 (18.0 and 18.4 ms against webgpu's 15.1 and",
  "14.7: the same GPU plans, run after auto's trial left the GPU idle, as above); auto's first",
  "runs 4.1–5.5 s on the CNNs (DenseNet-121 15.7) against webgpu's 0.5–1.1 (3.9): it builds",
  "and times the wasm plan too.",
];

/**
 * What a report `text` holds after its generated tables, maintained by hand since: from its first
 * `## Session` heading (or the targets' heading, where no session section precedes it) to the end,
 * or undefined where it has neither.
 */
export function handWritten(text: string): string[] | undefined {
  const lines = text.split("\n");
  const from = lines.findIndex((l) => l.startsWith("## Session ") || l === TARGETS[0]);
  return from < 0 ? undefined : lines.slice(from);
}

/**
 * The report of every `bench/models-*.json`, ending with what `previous` (the report it replaces)
 * holds by hand (see {@linkcode handWritten}), or with the targets.
 */
export function report(previous = ""): string {
  const files = readdirSync(RESULTS).filter((f) => /^models-.+\.json$/.test(f)).sort();
  const all: Results[] = files.map((f) => JSON.parse(readFileSync(`${RESULTS}${f}`, "utf8")));
  const lines = [
    "# Real models: kiln against ONNX Runtime Web",
    "",
    "`deno task bench:models` (`bench/models.ts`): each model and library in its own process,",
    "first run = load + compile + first result (kiln's kernel cache off), then the median of ≥ 20",
    "runs after 3 warm-ups, result back on the host; outputs checked against ONNX Runtime's",
    "recorded output (relative to its largest magnitude). ORT-web wasm uses one thread per core.",
    "Ratios are kiln ÷ ORT-web (below 1: kiln faster). Each cell is one process unless the run",
    "took `--processes N` (then the median over N, the runners taking turns round by round): on",
    "the 2-core VM the same configuration varied 2–3× between processes for sub-millisecond",
    "models (lenet on kiln wasm: 0.14–0.39 ms over 5 processes, 2026-11-23), so one-process",
    "ratios of such models are noisy.",
    "",
  ];
  const svg: string[] = [];
  for (const r of all) {
    lines.push(
      `## ${r.machine}: ${r.cores} cores (${r.cpu})${r.gpu ? `, GPU: ${r.gpu}` : ""}, ${r.date}${
        r.webgpu === "dawn" ? ", kiln's WebGPU: Dawn (`--gpu dawn`)" : ""
      }`,
      "",
      "| model | kiln wasm | kiln webgpu | kiln auto | ORT wasm | ORT webgpu | wasm ÷ ORT wasm | auto ÷ best kiln | auto's plan | webgpu ÷ ORT webgpu | first run kiln wasm / ORT wasm | first run kiln auto ÷ ORT wasm's | warm cache: first run ÷ ORT's | max rel. error (kiln) |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    );
    const models = [...new Set(r.results.map((x) => x.model))];
    for (const m of models) {
      const get = (runner: Runner) => r.results.find((x) => x.model === m && x.runner === runner);
      const med = (runner: Runner) => get(runner)?.medianMs;
      const cell = (runner: Runner) => {
        const x = get(runner);
        return x?.error ? `✗ ${x.error.slice(0, 60).replaceAll("|", "/")}` : fmt(x?.medianMs);
      };
      const ratio = (a?: number, b?: number) => (a && b ? (a / b).toFixed(2) : "—");
      const bestKiln = Math.min(
        ...[med("kiln-wasm"), med("kiln-webgpu")].filter((v): v is number => v !== undefined),
      );
      const errs = (["kiln-wasm", "kiln-webgpu", "kiln-auto", "kiln-warm"] as Runner[]).map((k) =>
        get(k)?.relError
      )
        .filter((v): v is number => v !== undefined);
      lines.push(
        `| ${m} | ${cell("kiln-wasm")} | ${cell("kiln-webgpu")} | ${cell("kiln-auto")} | ${
          cell("ort-wasm")
        } | ${cell("ort-webgpu")} | ${ratio(med("kiln-wasm"), med("ort-wasm"))} | ${
          ratio(med("kiln-auto"), Number.isFinite(bestKiln) ? bestKiln : undefined)
        } | ${get("kiln-auto")?.placement ?? "—"} | ${
          ratio(med("kiln-webgpu"), med("ort-webgpu"))
        } | ${fmt(get("kiln-wasm")?.firstMs)} / ${fmt(get("ort-wasm")?.firstMs)} | ${
          ratio(get("kiln-auto")?.firstMs, get("ort-wasm")?.firstMs)
        } | ${ratio(get("kiln-warm")?.firstMs, get("ort-wasm")?.firstMs)} | ${
          errs.length ? Math.max(...errs).toExponential(1) : "—"
        } |`,
      );
    }
    lines.push(
      "",
      "Times in ms (median). ✗: did not run, with the reason. auto's plan: the kernels auto put on",
      "each backend; where it is every kernel on wasm, auto ÷ best kiln compares the wasm runner's",
      "plan with itself in other processes.",
      "",
    );
    svg.push(chart(r));
  }
  writeFileSync(`${RESULTS}report-models.svg`, svgDoc(svg));
  lines.push(
    "![kiln wasm ÷ ORT-web wasm per model and machine](results/report-models.svg)",
    "",
    ...zooSection(),
    ...(handWritten(previous) ?? TARGETS),
  );
  return lines.join("\n");
}

/** Bars of kiln wasm ÷ ORT wasm per model for one machine (log scale around 1). */
function chart(r: Results): string {
  const models = [...new Set(r.results.map((x) => x.model))];
  const rows = models.map((m) => {
    const k = r.results.find((x) => x.model === m && x.runner === "kiln-wasm")?.medianMs;
    const o = r.results.find((x) => x.model === m && x.runner === "ort-wasm")?.medianMs;
    return { m, ratio: k && o ? k / o : undefined };
  });
  const parts = [
    `<text x="0" y="14" font-weight="bold">${r.machine} (${r.cores} cores): kiln wasm ÷ ORT-web wasm</text>`,
  ];
  rows.forEach(({ m, ratio }, i) => {
    const y = 24 + i * 18;
    parts.push(`<text x="0" y="${y + 12}">${m}</text>`);
    if (ratio === undefined) return;
    const w = Math.max(1, 120 + 60 * Math.log2(ratio));
    parts.push(
      `<rect x="170" y="${y}" width="${w}" height="14" fill="${ratio <= 1 ? "#3a7" : "#c54"}"/>`,
      `<text x="${175 + w}" y="${y + 12}">${ratio.toFixed(2)}</text>`,
    );
  });
  parts.push(`<line x1="290" y1="20" x2="290" y2="${24 + rows.length * 18}" stroke="#000"/>`);
  return `<g>${parts.join("")}</g>`;
}

function svgDoc(groups: string[]): string {
  const h = groups.length * 170;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="520" height="${h}" font-family="sans-serif" font-size="12">${
    groups.map((g, i) => `<g transform="translate(10, ${10 + i * 170})">${g}</g>`).join("")
  }</svg>\n`;
}
