/**
 * Smoke test of the browser bundle (`deno task build:web` → `npm/dist/kiln.web.js`): headless
 * Chromium loads it from a local server and runs a small graph on the wasm backend; the page
 * posts its result back here, where it is checked against float64 arithmetic. Chromium comes from
 * Debian's `chromium` package, installed here when missing (as root, like CI).
 *
 * Run: `deno task test:web`.
 *
 * @module
 */
import assert from "node:assert/strict";

const dist = new URL("./dist/", import.meta.url);
const bundle = new URL("kiln.web.js", dist);

/** The page's script: relu(x·W + b) on wasm, through the public API of the bundle. */
const page = `<!doctype html><meta charset="utf-8"><script type="module">
const report = (body) => fetch("/result", { method: "POST", body: JSON.stringify(body) });
try {
  const kiln = await import("/kiln.web.js");
  const b = new kiln.GraphBuilder();
  const x = b.input("x", [2, 3]);
  const w = b.param("w", [3, 2], "f32", new Float32Array([1, 0, 0, 1, 1, 1]));
  b.output("y", b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w]), b.constant(0.5)])]));
  const exe = await kiln.compile(b.build(), { backend: "wasm" });
  const { y } = await exe.run({ x: kiln.hostTensor(new Float32Array([1, -2, 3, 4, 5, -6]), [2, 3]) });
  await report({ shape: y.shape, data: Array.from(y.data) });
} catch (e) {
  await report({ error: String(e && e.stack || e) });
}
</script>`;

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

Deno.test("the browser bundle runs a graph on the wasm backend in headless Chromium", async () => {
  await Deno.stat(bundle).catch(() => {
    throw new Error(`${bundle.pathname} is missing. Fix: run deno task build:web first`);
  });
  const browser = await chromium();
  const { promise: result, resolve } = Promise.withResolvers<Record<string, unknown>>();
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/result") {
      resolve(await req.json());
      return new Response("ok");
    }
    if (path === "/kiln.web.js") {
      return new Response(await Deno.readFile(bundle), {
        headers: { "content-type": "text/javascript" },
      });
    }
    if (path === "/") return new Response(page, { headers: { "content-type": "text/html" } });
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
    const got = await result;
    assert.equal(got.error, undefined, String(got.error));
    assert.deepEqual(got.shape, [2, 2]);
    // x·W = [[4, 1], [-2, -1]] for x = [[1, -2, 3], [4, 5, -6]]; + 0.5 then relu.
    assert.deepEqual(got.data, [4.5, 1.5, 0, 0]);
  } finally {
    clearTimeout(timer);
    child.kill();
    await child.status;
    await server.shutdown();
    await removeWhenQuiet(profile);
  }
});
