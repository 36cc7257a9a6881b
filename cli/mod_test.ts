import assert from "node:assert/strict";
import { readbackNote } from "./args.ts";
import { ReferenceBackend } from "../mod.ts";
import { kiln, kilnWith } from "./testing.ts";

Deno.test("kiln run --json prints the demo's outputs, backend and timings", async () => {
  const auto = await kiln("run", "--json");
  assert.equal(auto.code, 0, auto.stderr);
  assert.ok(JSON.parse(auto.stdout).kernels.length <= 3);
  const { code, stdout } = await kiln("run", "--json", "--backend", "reference");
  assert.equal(code, 0);
  const report = JSON.parse(stdout);
  assert.equal(report.backend, "reference");
  assert.deepEqual(report.outputs.y.shape, [8, 10]);
  assert.equal(report.outputs.y.dtype, "f32");
  assert.ok(Math.abs(report.outputs.y.mean - 0.1) < 1e-6, "softmax rows sum to one");
  assert.equal(typeof report.timings.compileMs, "number");
  assert.equal(typeof report.timings.runMs, "number");
});

Deno.test("kiln run prints a readable summary; kiln info lists backends", async () => {
  const run = await kiln("run", "--runs", "2");
  assert.equal(run.code, 0);
  assert.match(run.stdout, /output {3}y: f32\[8, 10\]/);
  const info = await kiln("info", "--json");
  assert.equal(info.code, 0);
  assert.ok(JSON.parse(info.stdout).backends.some((b: { id: string }) => b.id === "reference"));
});

Deno.test("CLI errors say what was wrong and how to fix it", async () => {
  const bad = await kiln("run", "--backend", "nope");
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /No backend "nope".*Fix: use one of: reference/);
  const runs = await kiln("run", "--runs", "0");
  assert.equal(runs.code, 2);
  assert.match(runs.stderr, /--runs of kiln run must be a positive integer/);
  // Option errors are one kiln: line with a Fix and exit 2, never the parser's own text.
  const mlp = new URL("../../shared/models/mlp.onnx", import.meta.url).pathname;
  for (
    const [args, want] of [
      [["run", "--runs", "-3"], /^kiln run: --runs needs a value\. Fix: .*--runs=VALUE/],
      [["run", "--bogus"], /^kiln run: unknown option --bogus\. Fix:/],
      [["run", mlp, "--shape", "x=2x"], /^kiln: --shape x=2x is not a shape\. Fix:/],
      [["run", mlp, "--shape", "x=1e3x784"], /is not a shape/],
      [["run", "--runs", "1.5"], /must be a positive integer/],
    ] as const
  ) {
    const r = await kiln(...args);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.stderr, want, args.join(" "));
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
  const cmd = await kiln("explode");
  assert.equal(cmd.code, 2);
  assert.match(cmd.stderr, /unknown command "explode"/);
  const precision = await kiln("run", "--precision", "fp8");
  assert.equal(precision.code, 1);
  assert.match(precision.stderr, /Unknown precision "fp8".*Fix: pass precision: "f32"/);
  // f16 runs on every backend (as 16-bit words where the device has no f16).
  const half = await kiln("run", "--backend", "wasm", "--precision", "f16", "--json");
  assert.equal(half.code, 0, half.stderr);
});

Deno.test("kiln explain --json lists each kernel with its backend and fused ops", async () => {
  const { code, stdout } = await kiln("explain", "--json", "--backend", "reference");
  assert.equal(code, 0);
  const plan = JSON.parse(stdout);
  assert.ok(plan.kernels.length >= 1 && plan.kernels.length <= 3, `${plan.kernels.length} kernels`);
  for (const k of plan.kernels) {
    assert.equal(k.backend, "reference");
    assert.ok(Array.isArray(k.ops) && k.ops.length > 0);
  }
  assert.deepEqual(plan.kernels.map((k: { ops: string[] }) => k.ops), [["MatMul", "Add", "Relu"], [
    "MatMul",
    "Add",
  ], ["Softmax"]]);
});

Deno.test("a second kiln process takes every kernel from the disk cache (no codegen)", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // A named backend: under auto, rates the first process calibrates (and stores beside the
    // kernels) may move a kernel to another backend in the second.
    const run = ["run", "--json", "--backend", "wasm"];
    const first = JSON.parse((await kilnWith({ KILN_CACHE_DIR: dir }, ...run)).stdout);
    assert.equal(first.cache.misses, first.kernels.length);
    assert.equal(first.cache.diskHits, 0);
    const second = JSON.parse((await kilnWith({ KILN_CACHE_DIR: dir }, ...run)).stdout);
    assert.equal(second.cache.diskHits, second.kernels.length);
    assert.equal(second.cache.misses, 0);
    assert.equal(second.cache.codegenMs, 0);
    assert.deepEqual(second.outputs, first.outputs);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

for (const name of ["mlp", "lenet", "transformer_block"]) {
  for (const backend of ["reference", "wasm", "webgpu"]) {
    Deno.test(`kiln run ${name}.onnx --backend ${backend} --save writes y.bin within 1e-4 of ONNX Runtime`, async () => {
      const models = new URL("../../shared/models/", import.meta.url).pathname;
      const dir = await Deno.makeTempDir();
      try {
        const r = await kiln(
          "run",
          `${models}${name}.onnx`,
          "--input",
          `x=${models}${name}.in.x.float32.bin`,
          "--save",
          dir,
          "--backend",
          backend,
          "--runs",
          "1",
          "--json",
        );
        assert.equal(r.code, 0, r.stderr);
        const got = new Float32Array((await Deno.readFile(`${dir}/y.bin`)).buffer);
        const want = new Float32Array(
          (await Deno.readFile(`${models}${name}.out.y.float32.bin`)).buffer,
        );
        assert.equal(got.length, want.length);
        let worst = 0;
        for (let i = 0; i < want.length; i++) {
          worst = Math.max(worst, Math.abs(got[i] - want[i]));
        }
        assert.ok(worst <= 1e-4, `max abs difference ${worst}`);
        const index = JSON.parse(await Deno.readTextFile(`${dir}/outputs.json`));
        assert.equal(index.y.dtype, "f32");
        assert.equal(
          JSON.parse(r.stdout).inputs.x.source.endsWith(`${name}.in.x.float32.bin`),
          true,
        );
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    });
  }
}

Deno.test("kiln run --gpu dawn runs the model on Dawn's WebGPU; --gpu takes only dawn or navigator", async () => {
  const models = new URL("../../shared/models/", import.meta.url).pathname;
  const dir = await Deno.makeTempDir();
  try {
    // No Vulkan in CI: Dawn's GL backend over llvmpipe, headless.
    const env = { EGL_PLATFORM: "surfaceless", KILN_DAWN_FLAGS: "backend=opengles" };
    const args = ["run", `${models}lenet.onnx`, "--input", `x=${models}lenet.in.x.float32.bin`];
    const r = await kilnWith(env, ...args, "--gpu", "dawn", "--backend", "webgpu", "--save", dir);
    assert.equal(r.code, 0, r.stderr);
    const got = new Float32Array((await Deno.readFile(`${dir}/y.bin`)).buffer);
    const want = new Float32Array((await Deno.readFile(`${models}lenet.out.y.float32.bin`)).buffer);
    assert.ok(want.every((w, i) => Math.abs(got[i] - w) <= 1e-4));
    const info = await kilnWith(env, "info", "--gpu=dawn", "--json");
    assert.equal(info.code, 0, info.stderr);
    assert.match(info.stdout, /OpenGL/);
    const bad = await kiln(...args, "--gpu", "dwan");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--gpu dwan names no WebGPU implementation\. Fix: pass --gpu dawn/);
    const env2 = await kilnWith({ KILN_GPU: "metal" }, ...args);
    assert.equal(env2.code, 1);
    assert.match(env2.stderr, /KILN_GPU=metal .*Fix:/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kiln run with a bad model path, wrong input size or unknown input says how to fix it", async () => {
  const models = new URL("../../shared/models/", import.meta.url).pathname;
  const missing = await kiln("run", "/nonexistent/model.onnx");
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /Cannot read the model.*Fix: check the path/);
  const size = await kiln(
    "run",
    `${models}mlp.onnx`,
    "--input",
    `x=${models}lenet.in.x.float32.bin`,
  );
  assert.equal(size.code, 1);
  assert.match(size.stderr, /needs 25088.*Fix:/);
  const unknown = await kiln(
    "run",
    `${models}mlp.onnx`,
    "--input",
    `z=${models}mlp.in.x.float32.bin`,
  );
  assert.match(unknown.stderr, /no input "z".*Fix: use one of: x/);
  const notOnnx = await kiln("run", `${models}models.json`);
  assert.match(notOnnx.stderr, /could not be decoded|no graph|malformed.*Fix:/);
});

Deno.test("kiln bench prints a table; kiln explain works on a model", async () => {
  const models = new URL("../../shared/models/", import.meta.url).pathname;
  const b = await kiln("bench", `${models}mlp.onnx`, "--runs", "3");
  assert.equal(b.code, 0, b.stderr);
  assert.match(b.stdout, /backend\s+compile ms\s+first run ms\s+median ms\s+p90 ms/);
  assert.match(b.stdout, /^reference\s/m);
  const e = await kiln("explain", `${models}transformer_block.onnx`, "--json");
  const plan = JSON.parse(e.stdout);
  assert.ok(Object.keys(plan.groups).some((g) => g.startsWith("attention")));
});

Deno.test("hostile CLI arguments are typed errors checked before the compute, never stack traces", async () => {
  const mlp = new URL("../../shared/models/mlp.onnx", import.meta.url).pathname;
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/file`;
    await Deno.writeTextFile(file, "");
    const cases: [string[], RegExp][] = [
      [
        ["run", mlp, "--input", "x=/nonexistent.bin"],
        /--input \/nonexistent.bin does not exist.*Fix:/,
      ],
      [["run", mlp, "--input", `x=${dir}`], /is a directory.*Fix:/],
      [["run", mlp, "--input", "x=/dev/zero"], /not a regular file.*Fix:/],
      [["run", mlp, "--shape", "x=1000000000x784"], /over the limit of \d+ elements.*Fix:/],
      [["run", mlp, "--shape", "x=8x78400000"], /over the memory budget.*Fix:/],
      [["run", mlp, "--save", `${file}/out`], /--save .* cannot be used|--save .*Fix:/],
      [["explain", mlp, "--dot", `${dir}/missing/plan.dot`], /--dot .* does not exist.*Fix:/],
      [["run", "/dev/zero"], /not a regular file.*Fix:/],
      [["run", "--bogus"], /unknown option --bogus.*Fix:/],
    ];
    for (const [args, want] of cases) {
      const r = await kiln(...args);
      assert.notEqual(r.code, 0, args.join(" "));
      assert.match(r.stderr, want, args.join(" "));
      assert.doesNotMatch(r.stderr, /^\s+at /m, `${args.join(" ")}: a stack trace`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("distinct output names get distinct --save files", async () => {
  const { outputFileNames } = await import("./files.ts");
  const files = outputFileNames(["a/b", "a_b", "A_b", "outputs.json", "..", ""]);
  assert.equal(new Set(files.values()).size, 6);
  assert.deepEqual([...files.values()].slice(0, 3), ["a_b.bin", "a_b-2.bin", "A_b-3.bin"]);
  for (const f of files.values()) assert.match(f, /^[A-Za-z0-9_][A-Za-z0-9._-]*\.bin$/);
});

Deno.test("every command answers --help; --version prints the version", async () => {
  for (
    const args of [["run", "--help"], ["explain", "-h"], ["bench", "--help"], ["info", "--help"]]
  ) {
    const r = await kiln(...args);
    assert.equal(r.code, 0, args.join(" "));
    assert.match(r.stdout, /Usage:/);
  }
  for (const args of [["--version"], ["run", "--version"]]) {
    const r = await kiln(...args);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^kiln \d+\.\d+\.\d+/);
  }
});

Deno.test("kiln info MODEL summarizes the model; kiln bench takes --warmup, --threads, --backend", async () => {
  const models = new URL("../../shared/models/", import.meta.url).pathname;
  const i = await kiln("info", `${models}lenet.onnx`, "--json");
  assert.equal(i.code, 0, i.stderr);
  const s = JSON.parse(i.stdout);
  assert.deepEqual(s.inputs, [{ name: "x", type: "float32[4, 1, 28, 28]" }]);
  assert.deepEqual(s.outputs, [{ name: "y", type: "float32[4, 10]" }]);
  assert.equal(s.opsets[""], 17);
  assert.ok(s.parameters.elements > 10_000 && s.parameters.bytes === 4 * s.parameters.elements);
  assert.equal(s.ops.find((o: { op: string }) => o.op === "Conv")?.count, 2);
  assert.deepEqual(s.unsupported, []);
  const text = await kiln("info", `${models}vit_tiny.onnx`);
  assert.match(text.stdout, /^input +x: float32\[2, 3, 64, 64\]$/m);
  assert.match(text.stdout, /^support +every op imports$/m);
  const two = await kiln("info", "a.onnx", "b.onnx");
  assert.equal(two.code, 1);
  const b = await kiln(
    "bench",
    `${models}mlp.onnx`,
    "--backend",
    "wasm",
    "--warmup",
    "0",
    "--threads",
    "1",
    "--runs",
    "2",
    "--json",
  );
  assert.equal(b.code, 0, b.stderr);
  assert.deepEqual(
    JSON.parse(b.stdout).results.map((
      r: Record<string, unknown>,
    ) => [r.backend, r.warmup, r.threads]),
    [["wasm", 0, 1]],
  );
  const bad = await kiln("bench", "--warmup", "x");
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--warmup of kiln bench must be/);
});

Deno.test("kiln bench reads --input as kiln run does; an input given without --input is a usage error", async () => {
  const models = new URL("../../shared/models/", import.meta.url).pathname;
  const file = `${models}mlp.in.x.float32.bin`;
  const b = await kiln(
    "bench",
    `${models}mlp.onnx`,
    "--input",
    `x=${file}`,
    "--backend",
    "wasm",
    "--runs",
    "1",
    "--json",
  );
  assert.equal(b.code, 0, b.stderr);
  assert.deepEqual(JSON.parse(b.stdout).inputs, { x: file });
  // Read as a second model once, it left the inputs random without a word.
  for (const command of ["run", "bench", "explain"]) {
    const bare = await kiln(command, `${models}mlp.onnx`, `x=${file}`);
    assert.equal(bare.code, 2, `${command}: ${bare.stderr}`);
    assert.match(bare.stderr, new RegExp(`Fix: give inputs as --input x=`), command);
  }
});

Deno.test("cli/demo_mlp.ts run as a script prints its plan and output", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./demo_mlp.ts", import.meta.url).pathname],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const text = new TextDecoder().decode(out.stdout);
  assert.match(text, /^demo MLP 784 → 128 → 10, batch 8: \d+ kernel\(s\)$/m);
  assert.match(text, /^y\[0\] = \[(0\.\d{3}, ){9}0\.\d{3}\]$/m);
});

Deno.test("kiln explain --svg draws the plan with Graphviz, or says how to get it", async () => {
  const svg = `${await Deno.makeTempDir()}/plan.svg`;
  let hasDot = false;
  try {
    hasDot = (await new Deno.Command("dot", { args: ["-V"], stderr: "null" }).output()).success;
  } catch {
    // Not installed: the command cannot even start.
  }
  const r = await kiln("explain", "--svg", svg);
  if (hasDot) {
    assert.equal(r.code, 0, r.stderr);
    assert.match(await Deno.readTextFile(svg), /<svg[\s\S]*matmul_0/);
  } else {
    assert.equal(r.code, 1);
    assert.match(r.stderr, /needs Graphviz's dot, which is not installed\. Fix: install Graphviz/);
  }
});

Deno.test("kiln run on a double model: f64 on wasm, refused or --narrow-f64 on webgpu", async () => {
  const { GraphBuilder } = await import("../jit/frontend/graph_builder.ts");
  const { toOnnx } = await import("../onnx/export/export.ts");
  const b = new GraphBuilder();
  const x = b.input("x", [4], "f64");
  b.output(
    "y",
    b.op("Add", [b.op("Mul", [x, b.constant(1e200, [], "f64")]), b.constant(1, [], "f64")]),
  );
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeFile(`${dir}/double.onnx`, toOnnx(b.build()));
    await Deno.writeFile(
      `${dir}/x.bin`,
      new Uint8Array(new Float64Array([1, 2, 3, 1e-300]).buffer),
    );
    const args = ["run", `${dir}/double.onnx`, "--input", `x=${dir}/x.bin`, "--runs", "1"];
    const wasm = await kiln(...args, "--backend", "wasm", "--save", `${dir}/wasm`);
    assert.equal(wasm.code, 0, wasm.stderr);
    const y = new Float64Array((await Deno.readFile(`${dir}/wasm/y.bin`)).buffer);
    assert.deepEqual(Array.from(y), [1e200 + 1, 2e200 + 1, 3e200 + 1, 1e-100 + 1]);
    const refused = await kiln(...args, "--backend", "webgpu");
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /no f64 arithmetic.*Fix: .*narrowF64/);
    const narrow = await kiln(
      ...args,
      "--backend",
      "webgpu",
      "--narrow-f64",
      "--save",
      `${dir}/gpu`,
    );
    assert.equal(narrow.code, 0, narrow.stderr);
    const z = new Float64Array((await Deno.readFile(`${dir}/gpu/y.bin`)).buffer);
    // In f32, 1e200 overflows and 1e-300 flushes to 0: 0 · ∞ is NaN.
    assert.deepEqual(Array.from(z), [Infinity, Infinity, Infinity, NaN]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kiln run specialises on a fed input that decides a shape, as OnnxModel.run does", async () => {
  const { encodeModel } = await import("../onnx/wire/proto.ts");
  const tensor = (name: string, elemType: number, dims: number[]) => ({
    name,
    type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
  });
  // y = Reshape(x, shape) + 1: the output's shape is the value of the input `shape`.
  const bytes = encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "g",
      node: [
        { opType: "Reshape", input: ["x", "shape"], output: ["r"], attribute: [] },
        { opType: "Add", input: ["r", "one"], output: ["y"], attribute: [] },
      ],
      initializer: [{ name: "one", dataType: 1, dims: [], floatData: [1] }],
      input: [tensor("x", 1, [2, 6]), tensor("shape", 7, [2])],
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  });
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeFile(`${dir}/reshape.onnx`, bytes);
    await Deno.writeFile(
      `${dir}/x.bin`,
      new Uint8Array(Float32Array.from({ length: 12 }, (_, i) => i).buffer),
    );
    await Deno.writeFile(`${dir}/shape.bin`, new Uint8Array(BigInt64Array.of(3n, 4n).buffer));
    for (const backend of ["wasm", "reference"]) {
      const out = await kiln(
        "run",
        `${dir}/reshape.onnx`,
        "--input",
        `x=${dir}/x.bin`,
        "--input",
        `shape=${dir}/shape.bin`,
        "--backend",
        backend,
        "--runs",
        "2",
        "--json",
        "--save",
        `${dir}/${backend}`,
      );
      assert.equal(out.code, 0, out.stderr);
      const report = JSON.parse(out.stdout);
      assert.deepEqual(report.outputs.y.shape, [3, 4]);
      const y = new Float32Array((await Deno.readFile(`${dir}/${backend}/y.bin`)).buffer);
      assert.deepEqual(Array.from(y), Array.from({ length: 12 }, (_, i) => i + 1));
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kiln run points at Dawn where a hardware GPU's readbacks wait for Deno's mapAsync", () => {
  const base = new ReferenceBackend().capabilities();
  const deno = { ...base, name: "NVIDIA H200", software: false, readbackMs: 11.4 };
  assert.match(readbackNote(deno)!, /waits 11\.4 ms .*--gpu dawn/);
  // Not on Dawn, not on a software adapter (where auto runs nothing), not where readbacks are fast.
  assert.equal(readbackNote({ ...deno, name: "NVIDIA H200 (Dawn)", readbackMs: 0.04 }), undefined);
  assert.equal(readbackNote({ ...deno, name: "NVIDIA H200 (Dawn)" }), undefined);
  assert.equal(readbackNote({ ...deno, software: true }), undefined);
  assert.equal(readbackNote({ ...deno, readbackMs: 0.5 }), undefined);
});

Deno.test("--save with a trailing slash reports clean paths", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const r = await kiln("run", "--save", `${dir}/out/`, "--json", "--runs", "1");
    assert.equal(r.code, 0, r.stderr);
    const files = [...r.stdout.matchAll(/"file":"([^"]+)"/g)].map((m) => m[1]);
    assert.ok(files.length > 0, r.stdout);
    for (const f of files) assert.doesNotMatch(f, /\/\//, f);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kiln run shows a long compile's phases on stderr; --quiet shows none", async () => {
  const mlp = new URL("../../shared/models/mlp.onnx", import.meta.url).pathname;
  // KILN_PROGRESS_MS=0 shows progress from the first report, as a slow compile would.
  const shown = await kilnWith({ KILN_PROGRESS_MS: "0" }, "run", mlp, "--runs", "1");
  assert.equal(shown.code, 0, shown.stderr);
  for (const phase of ["import", "fuse", "codegen", "pipelines"]) {
    assert.match(shown.stderr, new RegExp(`^kiln: ${phase}`, "m"), shown.stderr);
  }
  const quiet = await kilnWith({ KILN_PROGRESS_MS: "0" }, "run", mlp, "--runs", "1", "--quiet");
  assert.equal(quiet.code, 0);
  assert.doesNotMatch(quiet.stderr, /kiln: (import|fuse|codegen|pipelines)/);
});

Deno.test("--gpu dawn without flags on a machine with no Vulkan falls back to Dawn's GL adapter", async () => {
  // What a newcomer types: no KILN_DAWN_FLAGS, no EGL_PLATFORM. Where Vulkan has an adapter (a
  // GPU machine) this runs there instead; either way the run succeeds.
  const env = Object.fromEntries(
    Object.entries(Deno.env.toObject()).filter(([k]) =>
      k !== "KILN_DAWN_FLAGS" && k !== "EGL_PLATFORM"
    ),
  );
  const cmd = new Deno.Command(Deno.execPath(), {
    clearEnv: true,
    env,
    args: [
      "run",
      "-A",
      new URL("./mod.ts", import.meta.url).pathname,
      "run",
      "--gpu",
      "dawn",
      "--backend",
      "webgpu",
      "--runs",
      "1",
      "--json",
    ],
    stdout: "piped",
    stderr: "piped",
  });
  const out = await cmd.output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  assert.equal(JSON.parse(new TextDecoder().decode(out.stdout)).backend, "webgpu");
});

Deno.test("on a software GPU kiln run shows each phase as it starts (the driver blocks the timers)", async () => {
  const r = await kiln("run", "--backend", "webgpu", "--runs", "1");
  assert.equal(r.code, 0, r.stderr);
  for (const phase of ["codegen", "pipelines", "run"]) {
    assert.match(r.stderr, new RegExp(`^kiln: ${phase}`, "m"), r.stderr);
  }
});

Deno.test("kiln explain --wat prints each wasm kernel as WebAssembly text, through Binaryen", async () => {
  const lenet = new URL("../../shared/models/lenet.onnx", import.meta.url).pathname;
  const wat = await kiln("explain", lenet, "--backend", "wasm", "--wat");
  assert.equal(wat.code, 0, wat.stderr);
  const kernels = wat.stdout.match(/^;; kernel \S+/gm) ?? [];
  assert.ok(kernels.length >= 3, wat.stdout.slice(0, 400));
  assert.equal((wat.stdout.match(/^\(module$/gm) ?? []).length, kernels.length);
  assert.match(wat.stdout, /\(export "run"/);
  assert.match(wat.stdout, /f32x4|v128/, "the kernels' SIMD shows in the text");
  // A plan with no wasm kernel has nothing to show: a typed usage error.
  const none = await kiln("explain", lenet, "--backend", "reference", "--wat");
  assert.equal(none.code, 2, none.stderr);
  assert.match(none.stderr, /Fix: pass --backend wasm/);
});

Deno.test("kiln run and bench say when seeded random inputs gave NaN, and not when the inputs are given", async () => {
  const { GraphBuilder } = await import("../jit/frontend/graph_builder.ts");
  const { toOnnx } = await import("../onnx/export/export.ts");
  // Log of a seeded input (in [−1, 1)) is NaN for its negative half.
  const b = new GraphBuilder();
  b.output("y", b.op("Log", [b.input("x", [8])]));
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeFile(`${dir}/log.onnx`, toOnnx(b.build()));
    await Deno.writeFile(`${dir}/x.bin`, new Uint8Array(new Float32Array(8).fill(2).buffer));
    const model = `${dir}/log.onnx`;
    for (const command of ["run", "bench"]) {
      const seeded = await kiln(command, model, "--backend", "reference", "--runs", "1");
      assert.equal(seeded.code, 0, seeded.stderr);
      assert.match(seeded.stderr, /note: y holds NaN from inputs seeded at random \(x\): give/);
      const given = await kiln(
        command,
        model,
        "--backend",
        "reference",
        "--runs",
        "1",
        "--input",
        `x=${dir}/x.bin`,
      );
      assert.equal(given.code, 0, given.stderr);
      assert.doesNotMatch(given.stderr, /holds NaN/);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
