/**
 * Smoke tests of kiln in a browser: headless Chromium loads a bundle from a local server and runs
 * a small graph and a real model (the shared mlp, fetched by URL with `OnnxModel.load`) on the
 * wasm backend, and, the page being cross-origin isolated, a large kernel on Web Workers; the
 * page posts its results back here, where they are checked against float64
 * arithmetic and ONNX Runtime's recorded output. Two bundles: the prebuilt one (`deno task build:web` →
 * `npm/dist/web/mod.js`, one ES module), and what a user's esbuild makes of the npm package
 * (`deno task build:npm` → `npm/dist/kiln.tgz`, installed into a fresh project, bundled with
 * `--bundle --platform=browser` and no externals into a classic script). Chromium comes from
 * Debian's `chromium` package, installed here when missing (as root, like CI).
 *
 * Run: `deno task test:web`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";

const dist = new URL("./dist/", import.meta.url);
const ESBUILD = "0.25.0";

/** The test's body, given the module namespace: relu(x·W + b) on wasm, reported to the server. */
const program = `async (kiln) => {
  const report = (body) => fetch("/result", { method: "POST", body: JSON.stringify(body) });
  try {
    const b = new kiln.GraphBuilder();
    const x = b.input("x", [2, 3]);
    const w = b.param("w", [3, 2], "f32", new Float32Array([1, 0, 0, 1, 1, 1]));
    b.output("y", b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w]), b.constant(0.5)])]));
    const exe = await kiln.compile(b.build(), { backend: "wasm" });
    const { y } = await exe.run({ x: kiln.hostTensor(new Float32Array([1, -2, 3, 4, 5, -6]), [2, 3]) });
    // A real model, fetched by URL, with its recorded input.
    const model = await kiln.OnnxModel.load(new URL("/mlp.onnx", location.href));
    const input = new Float32Array(await (await fetch("/mlp.in.bin")).arrayBuffer());
    const out = await model.run({ x: kiln.hostTensor(input, [8, 784]) }, { backend: "wasm" });
    // The page is cross-origin isolated: a kernel of 1M elements splits over Web Workers.
    const big = new kiln.GraphBuilder();
    const bx = big.input("x", [512, 2048]);
    big.output("y", big.op("Add", [big.op("Mul", [bx, big.constant(2)]), big.constant(1)]));
    const wide = await kiln.compile(big.build(), { backend: "wasm" });
    const data = new Float32Array(512 * 2048).map((_, i) => i % 7);
    let exact = true;
    // Runs until pieces ran on the workers (their start-up takes what the machine's load makes
    // it: 80 runs had not sufficed on a busy one), at least 80, at most 60 s.
    const until = performance.now() + 60000;
    for (let i = 0; i < 80 || (!kiln.stats().kiln_worker_pieces_total && performance.now() < until); i++) {
      const r = await wide.run({ x: kiln.hostTensor(data, [512, 2048]) });
      exact &&= r.y.data.every((v, j) => v === 2 * (j % 7) + 1);
      await new Promise((next) => setTimeout(next, 0));
    }
    await report({
      shape: y.shape,
      data: Array.from(y.data),
      mlp: Array.from(out.y.data),
      isolated: crossOriginIsolated,
      workerPieces: kiln.stats().kiln_worker_pieces_total,
      exact,
    });
  } catch (e) {
    await report({ error: String(e && e.stack || e) });
  }
}`;

async function chromium(): Promise<string> {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    const found = await new Deno.Command("sh", { args: ["-c", `command -v ${name}`] }).output();
    if (found.success) return new TextDecoder().decode(found.stdout).trim();
  }
  const aptGet = (...args: string[]) =>
    new Deno.Command("apt-get", {
      args,
      env: { DEBIAN_FRONTEND: "noninteractive" },
      stdout: "null",
      stderr: "inherit",
    }).output().then((o) => o.success, () => false);
  const install = () => aptGet("install", "-y", "-q", "--no-install-recommends", "chromium");
  // A fresh machine may have no package lists yet.
  if (!await install() && !(await aptGet("update", "-q") && await install())) {
    throw new Error(
      "Chromium is not installed and `apt-get install chromium` failed. Fix: install Debian's chromium package (as root), then rerun",
    );
  }
  return "chromium";
}

/** Chromium's helper processes outlive the main one for a moment and keep writing the profile. */
async function removeWhenQuiet(dir: string): Promise<void> {
  for (let attempt = 0;; attempt++) {
    try {
      return await Deno.remove(dir, { recursive: true });
    } catch (e) {
      if (attempt === 20) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** Serves `files` under a page that loads `/app.js` as `type`; returns what the page reports. */
async function inChromium(
  files: Record<string, Uint8Array<ArrayBuffer>>,
  type: "module" | "classic",
): Promise<Record<string, unknown>> {
  const browser = await chromium();
  const page = `<!doctype html><meta charset="utf-8"><script${
    type === "module" ? ' type="module"' : ""
  } src="/app.js"></script>`;
  const { promise: result, resolve } = Promise.withResolvers<Record<string, unknown>>();
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/result") {
      resolve(await req.json());
      return new Response("ok");
    }
    // Cross-origin isolation gives the page shared memory, hence worker threads.
    const isolated = {
      "cross-origin-opener-policy": "same-origin",
      "cross-origin-embedder-policy": "require-corp",
    };
    if (files[path]) {
      return new Response(files[path], {
        headers: { "content-type": "text/javascript", ...isolated },
      });
    }
    if (path === "/") {
      return new Response(page, { headers: { "content-type": "text/html", ...isolated } });
    }
    return new Response("not found", { status: 404 });
  });
  const profile = await Deno.makeTempDir({ prefix: "kiln-chromium-" });
  const child = new Deno.Command(browser, {
    args: [
      "--headless=new",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      `--user-data-dir=${profile}`,
      `http://127.0.0.1:${server.addr.port}/`,
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const timer = setTimeout(
    () => resolve({ error: "no result from the page within 120 s" }),
    120_000,
  );
  try {
    return await result;
  } finally {
    clearTimeout(timer);
    child.kill();
    await child.status;
    await server.shutdown();
    await removeWhenQuiet(profile);
  }
}

/** The shared mlp model, its input and ONNX Runtime's output (the tests need `../shared`). */
const models = new URL("../../shared/models/", import.meta.url);
const mlpFiles = async (): Promise<Record<string, Uint8Array<ArrayBuffer>>> => ({
  "/mlp.onnx": await Deno.readFile(new URL("mlp.onnx", models)),
  "/mlp.in.bin": await Deno.readFile(new URL("mlp.in.x.float32.bin", models)),
});

async function checkResult(got: Record<string, unknown>): Promise<void> {
  assert.equal(got.error, undefined, String(got.error));
  // Threads: the isolated page's large kernel ran partly on Web Workers, exactly.
  assert.equal(got.isolated, true);
  assert.equal(got.exact, true);
  assert.ok((got.workerPieces as number) > 0, `worker pieces: ${got.workerPieces}`);
  assert.deepEqual(got.shape, [2, 2]);
  // x·W = [[4, 1], [-2, -1]] for x = [[1, -2, 3], [4, 5, -6]]; + 0.5 then relu.
  assert.deepEqual(got.data, [4.5, 1.5, 0, 0]);
  // mlp within 1e-4 of ONNX Runtime's output, relative to its largest magnitude.
  const want = new Float32Array(
    (await Deno.readFile(new URL("mlp.out.y.float32.bin", models))).buffer,
  );
  const mlp = got.mlp as number[];
  assert.equal(mlp.length, want.length);
  const scale = Math.max(...Array.from(want, Math.abs));
  mlp.forEach((v, i) =>
    assert.ok(Math.abs(v - want[i]) <= 1e-4 * scale, `mlp y[${i}] = ${v}, want ${want[i]}`)
  );
}

async function built(name: string, task: string): Promise<URL> {
  const file = new URL(name, dist);
  await Deno.stat(file).catch(() => {
    throw new Error(`${file.pathname} is missing. Fix: run deno task ${task} first`);
  });
  return file;
}

Deno.test("the prebuilt browser bundle runs a graph and a real model on wasm in headless Chromium", async () => {
  const dir = await built("web/mod.js", "build:web");
  const files: Record<string, Uint8Array<ArrayBuffer>> = {};
  for await (const f of Deno.readDir(new URL("./", dir))) {
    files[`/web/${f.name}`] = await Deno.readFile(new URL(f.name, dir));
  }
  // kiln generates its kernels itself: the bundle is one module, with no chunk to load later.
  assert.deepEqual(Object.keys(files), ["/web/mod.js"]);
  const app = `import * as kiln from "/web/mod.js";\n(${program})(kiln);\n`;
  await checkResult(
    await inChromium(
      { "/app.js": new TextEncoder().encode(app), ...files, ...await mlpFiles() },
      "module",
    ),
  );
});

Deno.test("esbuild bundles the npm package for the browser with no externals, and it runs", async () => {
  const tarball = await built("kiln.tgz", "build:npm");
  const project = await Deno.makeTempDir({ prefix: "kiln-esbuild-" });
  try {
    await Deno.writeTextFile(
      `${project}/package.json`,
      JSON.stringify({ name: "browser-app", private: true, type: "module" }),
    );
    execFileSync("npm", [
      "install",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      tarball.pathname,
      `esbuild@${ESBUILD}`,
    ], { cwd: project, stdio: ["ignore", "ignore", "inherit"] });
    await Deno.writeTextFile(
      `${project}/app.js`,
      `import * as kiln from "@kiln/kiln";\n(${program})(kiln);\n`,
    );
    execFileSync(
      `${project}/node_modules/.bin/esbuild`,
      ["app.js", "--bundle", "--platform=browser", "--outfile=out.js", "--log-level=error"],
      { cwd: project, stdio: ["ignore", "ignore", "inherit"] },
    );
    await checkResult(
      await inChromium(
        { "/app.js": await Deno.readFile(`${project}/out.js`), ...await mlpFiles() },
        "classic",
      ),
    );
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});
