// Tests the npm tarball the way a Node user meets it: `npm install` into an empty project, then
// the reference, wasm and WebGPU (Dawn, through the `webgpu` package) backends and ONNX import
// through the package's own entry points, and its .d.ts checked by tsc.
//
// Run: `deno task build:npm && node --test npm/package_test.mjs` (Node >= 20). The tarball path
// can be overridden with KILN_TARBALL.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const tarball = resolve(process.env.KILN_TARBALL ?? join(repo, "npm/dist/kiln.tgz"));
const versions = { webgpu: "0.6.2", typescript: "5.9.3" };
let project = "";
let kiln;
let cli;
let webgpu;

before(() => {
  project = mkdtempSync(join(tmpdir(), "kiln-npm-"));
  writeFileSync(
    join(project, "package.json"),
    JSON.stringify({ name: "consumer", private: true, type: "module" }),
  );
  execFileSync("npm", [
    "install",
    "--no-audit",
    "--no-fund",
    "--loglevel=error",
    tarball,
    `webgpu@${versions.webgpu}`,
    `typescript@${versions.typescript}`,
  ], { cwd: project, stdio: ["ignore", "ignore", "inherit"] });
  const require = createRequire(join(project, "package.json"));
  const load = (name) => import(pathToFileURL(require.resolve(name)).href);
  return Promise.all([load("@kiln/kiln"), load("@kiln/kiln/cli"), load("webgpu")]).then(
    ([k, c, w]) => {
      kiln = k;
      cli = c;
      webgpu = w;
    },
  );
}, { timeout: 300_000 });

after(() => {
  if (project) rmSync(project, { recursive: true, force: true });
});

/** relu(x·W + b) then softmax over the last axis: matmul, bias, activation and a row reduction. */
function smallModel() {
  const b = new kiln.GraphBuilder();
  const x = b.input("x", [4, 3]);
  const w = b.param("w", [3, 5], "f32", Float32Array.from({ length: 15 }, (_, i) => (i % 7) - 3));
  const bias = b.param("b", [5], "f32", new Float32Array([0.5, -1, 0, 1, 2]));
  const h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w]), bias])]);
  b.output("y", b.op("Softmax", [h], { axis: -1 }));
  return b.build();
}

const input = () => ({
  x: kiln.hostTensor(Float32Array.from({ length: 12 }, (_, i) => (i - 6) / 4), [4, 3]),
});

/** The same model in float64, written out by hand. */
function expected() {
  const x = input().x.data;
  const out = new Float64Array(20);
  for (let r = 0; r < 4; r++) {
    const h = [0.5, -1, 0, 1, 2].map((bias, c) => {
      let s = bias;
      for (let k = 0; k < 3; k++) s += x[r * 3 + k] * (((k * 5 + c) % 7) - 3);
      return Math.max(s, 0);
    });
    const m = Math.max(...h);
    const e = h.map((v) => Math.exp(v - m));
    const z = e.reduce((a, v) => a + v, 0);
    e.forEach((v, c) => (out[r * 5 + c] = v / z));
  }
  return out;
}

async function runOn(backend) {
  const exe = await kiln.compile(smallModel(), { backend });
  try {
    const { y } = await exe.run(input());
    assert.deepEqual(y.shape, [4, 5]);
    const want = expected();
    for (let i = 0; i < want.length; i++) {
      assert.ok(Math.abs(y.data[i] - want[i]) <= 1e-6, `y[${i}] = ${y.data[i]}, want ${want[i]}`);
    }
  } finally {
    exe.dispose();
  }
}

/** kiln's WebGPU backend on Dawn's GL backend: with no display (CI), a software llvmpipe adapter. */
function dawn() {
  process.env.EGL_PLATFORM ??= "surfaceless";
  return new kiln.WebGpuBackend({
    gpu: webgpu.create(["backend=opengles"]),
    featureLevel: "compatibility",
    // Dawn here runs on Mesa's llvmpipe: a software adapter the policies skip unless asked.
    allowSoftware: true,
  });
}

test("reference backend computes the model", () => runOn("reference"));

test("wasm backend computes the model with a generated kernel", () => runOn("wasm"));

test("WebGPU backend computes the model on Dawn", () => runOn(dawn()));

test("the tarball holds the license and the browser bundle, and nothing of a user's tree", () => {
  const files = execFileSync("tar", ["tzf", tarball], { encoding: "utf8" }).split("\n");
  for (const f of ["package/LICENSE", "package/web/mod.js", "package/mod.js"]) {
    assert.ok(files.includes(f), `${f} missing`);
  }
  const stray = files.filter((f) =>
    /^package\/(out|bench|npm|\.device)\//.test(f) || /_test\.js$/.test(f)
  );
  assert.deepEqual(stray, []);
  const pkg = JSON.parse(
    readFileSync(join(project, "node_modules/@kiln/kiln/package.json"), "utf8"),
  );
  assert.ok(pkg.description && pkg.keywords?.length && pkg.license === "MIT");
  assert.equal(pkg.exports["./web"].default, "./web/mod.js");
});

test("with the webgpu package installed, the default backends include WebGPU through Dawn", () => {
  const ids = kiln.defaultBackends().list().map((b) => b.id);
  assert.ok(ids.includes("webgpu"), `registered: ${ids}`);
});

test('gpu: "dawn" loads the installed webgpu package itself', () => {
  process.env.EGL_PLATFORM ??= "surfaceless";
  return runOn(
    new kiln.WebGpuBackend({ gpu: "dawn", dawnFlags: ["backend=opengles"], allowSoftware: true }),
  );
});

test("WebGPU on Dawn matches the reference on IEEE edge cases (x/0, NaN, pow, casts)", async () => {
  const b = new kiln.GraphBuilder();
  const x = b.input("x", [8]);
  const y = b.input("y", [8]);
  b.output("div", b.op("Div", [x, y]));
  b.output("pow", b.op("Pow", [x, y]));
  b.output("max", b.op("ReduceMax", [b.op("Div", [x, y])], { axes: [0], keepdims: 0 }));
  b.output("int", b.op("Cast", [b.op("Div", [x, y])], { to: "i32" }));
  const graph = b.build();
  const inputs = {
    x: kiln.hostTensor(new Float32Array([1, -1, 0, NaN, 2, -8, 0, 3.5]), [8]),
    y: kiln.hostTensor(new Float32Array([0, 0, 0, 1, 0.5, 1 / 3, -2, 2]), [8]),
  };
  const [want, got] = await Promise.all(
    ["reference", dawn()].map(async (backend) => {
      const exe = await kiln.compile(graph, { backend });
      try {
        return await exe.run(inputs);
      } finally {
        exe.dispose();
      }
    }),
  );
  for (const name of Object.keys(want)) {
    const w = Array.from(want[name].data), g = Array.from(got[name].data);
    for (let i = 0; i < w.length; i++) {
      const same = Object.is(w[i], g[i]) || (w[i] === g[i]) ||
        Math.abs(w[i] - g[i]) <= 1e-6 * Math.abs(w[i]);
      assert.ok(same, `${name}[${i}]: webgpu ${g[i]}, reference ${w[i]}`);
    }
  }
});

test("lazy tensors realize and bad input is a KilnError with a Fix hint", async () => {
  const y = kiln.tensor([[1, 2, 3], [4, 5, 6]]).mul(2).sum(-1);
  assert.deepEqual(Array.from(await y.data()), [12, 30]);
  assert.throws(
    () => kiln.tensor([1, 2, 3]).add(kiln.tensor([1, 2])),
    (e) => e instanceof kiln.KilnError && /Fix:/.test(e.message),
  );
});

/** The recorded inputs and ONNX Runtime's output of a model exported from PyTorch. */
function modelCase(dir, name) {
  const meta = JSON.parse(readFileSync(join(dir, "models.json"), "utf8"))[name];
  const read = (f) => {
    const b = readFileSync(join(dir, f));
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  };
  const inputs = Object.fromEntries(
    Object.entries(meta.inputs).map(([k, [shape, dtype]]) => {
      const bytes = read(`${name}.in.${k}.${dtype}.bin`);
      return [
        k,
        dtype === "int64"
          ? kiln.hostTensor(new BigInt64Array(bytes), shape, "i64")
          : kiln.hostTensor(new Float32Array(bytes), shape, "f32"),
      ];
    }),
  );
  return { inputs, want: new Float32Array(read(`${name}.out.y.float32.bin`)) };
}

const MODELS = [
  ...["mlp", "lenet", "transformer_block"].map((name) => [join(repo, "../shared/models"), name]),
  ...["resnet_block", "mobile_block", "encoder_mask", "embedding_mlp"].map((
    name,
  ) => [join(repo, "onnx/testdata"), name]),
];

test("ONNX models exported from PyTorch match ONNX Runtime on wasm and on Dawn", async () => {
  const gpu = dawn();
  // The defaults hold Dawn already (the webgpu package is installed): this one, on the GL
  // backend with a software adapter allowed, takes its place.
  const registry = kiln.BackendRegistry.withDefaults().register(gpu, { replace: true });
  const gpuWork = () => gpu.poolStats().allocations + gpu.poolStats().reuses;
  for (const [dir, name] of MODELS) {
    const model = await kiln.OnnxModel.load(join(dir, `${name}.onnx`));
    const { inputs, want } = modelCase(dir, name);
    for (const backendKind of ["cpu-simd", "gpu"]) {
      const before = gpuWork();
      const { y } = await model.run(inputs, {
        registry,
        policy: { kind: "prefer", backendKind },
        cache: false,
      });
      if (backendKind === "gpu") assert.ok(gpuWork() > before, `${name}: nothing ran on Dawn`);
      assert.equal(y.data.length, want.length);
      for (let i = 0; i < want.length; i++) {
        assert.ok(
          Math.abs(y.data[i] - want[i]) <= 1e-4,
          `${name} on ${backendKind}: y[${i}] = ${y.data[i]}, ONNX Runtime ${want[i]}`,
        );
      }
    }
  }
});

test("the wasm backend takes one thread per core on Node, navigator or not", async () => {
  const { availableParallelism } = await import("node:os");
  const wasm = new kiln.WasmBackend();
  await wasm.prepare();
  assert.equal(wasm.capabilities().threads, availableParallelism());
});

test("the CLI entry runs the bundled demo model", async () => {
  const logged = [];
  const log = console.log;
  console.log = (...a) => logged.push(a.join(" "));
  try {
    assert.equal(await cli.main(["run", "--backend", "wasm", "--json"]), 0);
  } finally {
    console.log = log;
  }
  const report = JSON.parse(logged.join("\n"));
  assert.ok(report.outputs.y, JSON.stringify(report).slice(0, 200));
});

test("npx kiln runs a model from files, saves its output and exits with the CLI's codes", () => {
  const models = resolve(repo, "../shared/models");
  const out = join(project, "out");
  const npx = (...args) =>
    execFileSync("npx", ["--no-install", "kiln", ...args], { cwd: project, encoding: "utf8" });
  assert.match(npx("--version"), /^kiln \d+\.\d+\.\d+/);
  assert.match(npx("run", "--help"), /Usage:/);
  const report = JSON.parse(npx(
    "run",
    join(models, "mlp.onnx"),
    "--input",
    `x=${join(models, "mlp.in.x.float32.bin")}`,
    "--save",
    out,
    "--json",
    "--backend",
    "wasm",
  ));
  assert.deepEqual(report.outputs.y.shape, [8, 10]);
  // readFileSync's Buffer may be a view into a shared pool: copy exactly its bytes.
  const floats = (path) => {
    const b = readFileSync(path);
    return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  };
  const y = floats(join(out, "y.bin"));
  const want = floats(join(models, "mlp.out.y.float32.bin"));
  assert.equal(y.length, want.length);
  const scale = Math.max(...want.map(Math.abs));
  assert.ok(y.every((v, i) => Math.abs(v - want[i]) <= 1e-4 * scale), "y.bin matches ONNX Runtime");
  // A missing input file: a typed message with a Fix:, exit code 1, no stack trace.
  try {
    npx("run", join(models, "mlp.onnx"), "--input", "x=/nonexistent.bin");
    assert.fail("expected exit code 1");
  } catch (e) {
    assert.equal(e.status, 1);
    assert.match(String(e.stderr), /does not exist\. Fix:/);
    assert.doesNotMatch(String(e.stderr), /\n\s+at /);
  }
});

test("npx kiln run --backend webgpu works where webgpu is installed, and names it where it is not", () => {
  // What a newcomer types: no Dawn flags, no EGL settings (a machine without a GPU gets Dawn's
  // GL backend over Mesa).
  const env = { ...process.env };
  for (const k of ["KILN_DAWN_FLAGS", "EGL_PLATFORM", "KILN_GPU"]) delete env[k];
  const run = (cwd) =>
    execFileSync("npx", ["--no-install", "kiln", "run", "--backend", "webgpu", "--json"], {
      cwd,
      env,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
  assert.equal(JSON.parse(run(project)).backend, "webgpu");
  const bare = mkdtempSync(join(tmpdir(), "kiln-npm-bare-"));
  try {
    writeFileSync(join(bare, "package.json"), JSON.stringify({ name: "bare", private: true }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", tarball], {
      cwd: bare,
      stdio: ["ignore", "ignore", "inherit"],
    });
    assert.throws(() => run(bare), (e) => /npm install webgpu/.test(String(e.stderr)));
  } finally {
    rmSync(bare, { recursive: true, force: true });
  }
});

test("the tarball carries no inline source maps (they were most of its JavaScript)", () => {
  const root = dirname(createRequire(join(project, "package.json")).resolve("@kiln/kiln"));
  const js = readdirSync(root, { recursive: true }).filter((f) => String(f).endsWith(".js"));
  assert.ok(js.length > 50, `${js.length} modules`);
  for (const f of js) {
    assert.ok(
      !readFileSync(join(root, String(f)), "utf8").includes("sourceMappingURL=data:"),
      String(f),
    );
  }
});

test("the package's .d.ts type-check a TypeScript consumer: default settings and strict ones", () => {
  writeFileSync(
    join(project, "consumer.ts"),
    `import * as kiln from "@kiln/kiln";
const b = new kiln.GraphBuilder();
b.output("y", b.op("Relu", [b.input("x", [2])]));
const exe: Promise<kiln.Executable> = kiln.compile(b.build(), { backend: "wasm" });
const gpu: kiln.WebGpuBackend = new kiln.WebGpuBackend({ featureLevel: "compatibility" });
export { exe, gpu };
`,
  );
  // Default settings with an es2022 + DOM lib (no disposable lib, no types option: the package
  // brings WebGPU's types and declares Symbol.dispose), then a strict Node ESM setup on newer libs.
  const configs = [
    { lib: ["es2022", "dom"], noEmit: true },
    {
      strict: true,
      noEmit: true,
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "es2022",
      lib: ["es2023", "esnext.disposable", "dom"],
    },
  ];
  for (const compilerOptions of configs) {
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({ compilerOptions, files: ["consumer.ts"] }),
    );
    try {
      execFileSync(join(project, "node_modules/.bin/tsc"), ["-p", project], { encoding: "utf8" });
    } catch (e) {
      assert.fail(
        `tsc rejected the package's types (${JSON.stringify(compilerOptions)}):\n${e.stdout}`,
      );
    }
  }
});
