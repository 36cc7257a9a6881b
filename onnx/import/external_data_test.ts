/**
 * Models whose weights live in a data file beside them (as PyTorch's exporter writes them), read
 * from a path, a file URL and over http; bad locations, short files and bytes without their
 * file are typed errors.
 */
import assert from "node:assert/strict";
import { setMemoryBudget } from "../../jit/runtime/budget.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { OnnxModel } from "../../mod.ts";
import { decodeModel, encodeModel, type ModelProto, type TensorProto } from "../wire/proto.ts";
import { referenceModel } from "../testdata.ts";

/**
 * `proto` with its initializers' bytes moved to `data` (their file "weights.bin" by default), 16
 * bytes apart, the first one's length left to its dims; the second initializer becomes a
 * Constant node's attribute, external too.
 */
function externalized(proto: ModelProto, location = "weights.bin") {
  const chunks: Uint8Array[] = [];
  let at = 0;
  const move = (t: TensorProto, i: number) => {
    const raw = t.rawData!;
    const entries = [
      { key: "location", value: location },
      { key: "offset", value: String(at) },
      ...(i === 0 ? [] : [{ key: "length", value: String(raw.byteLength) }]),
    ];
    chunks.push(raw, new Uint8Array(16 - raw.byteLength % 16));
    at += raw.byteLength + 16 - raw.byteLength % 16;
    t.rawData = new Uint8Array();
    t.externalData = entries;
    t.dataLocation = 1;
  };
  proto.graph.initializer.forEach(move);
  const [constant] = proto.graph.initializer.splice(1, 1);
  proto.graph.node.unshift({
    opType: "Constant",
    input: [],
    output: [constant.name!],
    attribute: [{ name: "value", type: 4, t: constant }],
  });
  const data = new Uint8Array(at);
  let offset = 0;
  for (const c of chunks) data.set(c, (offset += c.byteLength) - c.byteLength);
  return { bytes: encodeModel(proto), data };
}

const typed = (pattern: RegExp) => (e: unknown) =>
  e instanceof KilnError && pattern.test(e.message) && /Fix:/.test(e.message);

Deno.test("external data: read beside a model from its path, a file URL and over http", async () => {
  const m = await referenceModel("mlp");
  const want = (await OnnxModel.fromBytes(m.bytes).run({ x: m.x }, { backend: "reference" })).y;
  const { bytes, data } = externalized(decodeModel(m.bytes));
  assert.ok(data.byteLength > 1000);
  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/sub`);
    await Deno.writeFile(`${dir}/sub/m.onnx`, bytes);
    await Deno.writeFile(`${dir}/sub/weights.bin`, data);
    for (const path of [`${dir}/sub/m.onnx`, new URL(`file://${dir}/sub/m.onnx`)]) {
      const model = await OnnxModel.load(path);
      const got = (await model.run({ x: m.x }, { backend: "reference" })).y;
      assert.deepEqual(got.data, want.data, String(path));
    }
    // The bytes alone have no file to read from: the error says how to load them.
    await assert.rejects(
      () => OnnxModel.fromBytes(bytes).run({ x: m.x }, { backend: "reference" }),
      typed(/external file.*OnnxModel\.load/s),
    );
    // Over http, relative to the model's URL.
    const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, async (r) => {
      const name = new URL(r.url).pathname.split("/").pop()!;
      const file = await Deno.readFile(`${dir}/sub/${name}`).catch(() => undefined);
      return new Response(file, { status: file ? 200 : 404 });
    });
    try {
      const url = `http://127.0.0.1:${server.addr.port}/models/m.onnx`;
      const got = (await (await OnnxModel.load(url)).run({ x: m.x }, { backend: "reference" })).y;
      assert.deepEqual(got.data, want.data);
    } finally {
      await server.shutdown();
    }
    // A missing or short data file.
    await Deno.remove(`${dir}/sub/weights.bin`);
    await assert.rejects(() => OnnxModel.load(`${dir}/sub/m.onnx`), typed(/weights\.bin/));
    await Deno.writeFile(`${dir}/sub/weights.bin`, data.subarray(0, data.byteLength - 200));
    await assert.rejects(() => OnnxModel.load(`${dir}/sub/m.onnx`), typed(/pass its end/));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("external data: locations outside the model's folder and wrong lengths are refused", async () => {
  const m = await referenceModel("mlp");
  const dir = await Deno.makeTempDir();
  try {
    for (const location of ["../weights.bin", "/etc/passwd", "a/../../weights.bin", "C:\\w.bin"]) {
      await Deno.writeFile(`${dir}/m.onnx`, externalized(decodeModel(m.bytes), location).bytes);
      await assert.rejects(() => OnnxModel.load(`${dir}/m.onnx`), typed(/leaves the model/));
    }
    const proto = decodeModel(m.bytes);
    const { data } = externalized(proto);
    proto.graph.initializer[0].externalData!.push({ key: "length", value: "12" });
    await Deno.writeFile(`${dir}/m.onnx`, encodeModel(proto));
    await Deno.writeFile(`${dir}/weights.bin`, data);
    await assert.rejects(() => OnnxModel.load(`${dir}/m.onnx`), typed(/12 bytes long/));
    proto.graph.initializer[0].externalData = [{ key: "offset", value: "0" }];
    await Deno.writeFile(`${dir}/m.onnx`, encodeModel(proto));
    await assert.rejects(() => OnnxModel.load(`${dir}/m.onnx`), typed(/no location/));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("external data: links that lead outside the model's folder are refused", async () => {
  const m = await referenceModel("mlp");
  const { bytes, data } = externalized(decodeModel(m.bytes), "sub/weights.bin");
  const root = await Deno.makeTempDir();
  try {
    // The data the links point at, outside the model's folder.
    await Deno.mkdir(`${root}/outside`);
    await Deno.writeFile(`${root}/outside/weights.bin`, data);
    await Deno.mkdir(`${root}/model`);
    await Deno.writeFile(`${root}/model/m.onnx`, bytes);
    // A folder on the way is a link out (`sub -> /etc`).
    await Deno.symlink(`${root}/outside`, `${root}/model/sub`);
    await assert.rejects(() => OnnxModel.load(`${root}/model/m.onnx`), typed(/leads outside/));
    // The file itself is a link out (`m.onnx.data -> /etc/passwd`).
    await Deno.remove(`${root}/model/sub`);
    await Deno.mkdir(`${root}/model/sub`);
    await Deno.symlink(`${root}/outside/weights.bin`, `${root}/model/sub/weights.bin`);
    await assert.rejects(() => OnnxModel.load(`${root}/model/m.onnx`), typed(/leads outside/));
    // A link that stays inside the folder is read as the file it names.
    await Deno.remove(`${root}/model/sub/weights.bin`);
    await Deno.writeFile(`${root}/model/real.bin`, data);
    await Deno.symlink(`${root}/model/real.bin`, `${root}/model/sub/weights.bin`);
    const model = await OnnxModel.load(`${root}/model/m.onnx`);
    const want = (await OnnxModel.fromBytes(m.bytes).run({ x: m.x }, { backend: "reference" })).y;
    assert.deepEqual((await model.run({ x: m.x }, { backend: "reference" })).y.data, want.data);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("external data: a URL model reads only its own origin and folder", async () => {
  const m = await referenceModel("mlp");
  const seen: string[] = [];
  const other = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (r) => {
    seen.push(`other ${new URL(r.url).pathname}`);
    return new Response(new Uint8Array(1 << 16));
  });
  const files = new Map<string, Uint8Array<ArrayBuffer>>();
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (r) => {
    const path = new URL(r.url).pathname;
    seen.push(path);
    const file = files.get(path);
    return new Response(file ?? null, { status: file ? 200 : 404 });
  });
  try {
    const locations = [
      "file:///etc/passwd",
      `http://127.0.0.1:${other.addr.port}/x`,
      `//127.0.0.1:${other.addr.port}/x`,
      "%2e%2e/secret",
      "a/%2E%2E/%2e%2e/secret",
      "..%2fsecret",
      "%2fetc%2fpasswd",
    ];
    files.set("/secret", new Uint8Array(1 << 16));
    for (const location of locations) {
      files.set("/models/m.onnx", externalized(decodeModel(m.bytes), location).bytes.slice());
      const url = `http://127.0.0.1:${server.addr.port}/models/m.onnx`;
      await assert.rejects(() => OnnxModel.load(url), typed(/leaves the model|no URL/), location);
    }
    assert.deepEqual(seen, locations.map(() => "/models/m.onnx"));
  } finally {
    await server.shutdown();
    await other.shutdown();
  }
});

Deno.test("external data: a redirect is followed only where the location itself could go", async () => {
  const m = await referenceModel("mlp");
  const { bytes, data } = externalized(decodeModel(m.bytes));
  const seen: string[] = [];
  const other = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (r) => {
    seen.push(`other ${new URL(r.url).pathname}`);
    return new Response(data);
  });
  const redirects = new Map<string, string>();
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (r) => {
    const path = new URL(r.url).pathname;
    seen.push(path);
    if (path === "/models/m.onnx") return new Response(bytes.slice());
    if (path === "/models/real.bin" || path === "/secret") return new Response(data);
    const to = redirects.get(path);
    return to ? Response.redirect(to, 302) : new Response(null, { status: 404 });
  });
  try {
    const url = `http://127.0.0.1:${server.addr.port}/models/m.onnx`;
    const origin = `http://127.0.0.1:${server.addr.port}`;
    // Another origin, the same origin outside the folder, a scheme change: never requested.
    for (
      const to of [
        `http://127.0.0.1:${other.addr.port}/x`,
        `${origin}/secret`,
        "file:///etc/passwd",
      ]
    ) {
      seen.length = 0;
      redirects.set("/models/weights.bin", to);
      await assert.rejects(() => OnnxModel.load(url), typed(/no URL|leaves the model/), to);
      assert.deepEqual(seen, ["/models/m.onnx", "/models/weights.bin"], to);
    }
    // A redirect loop ends in a typed error.
    redirects.set("/models/weights.bin", `${origin}/models/weights.bin`);
    await assert.rejects(() => OnnxModel.load(url), typed(/redirects/));
    // Within the folder, a redirect is taken.
    redirects.set("/models/weights.bin", `${origin}/models/real.bin`);
    const model = await OnnxModel.load(url);
    const want = (await OnnxModel.fromBytes(m.bytes).run({ x: m.x }, { backend: "reference" })).y;
    assert.deepEqual((await model.run({ x: m.x }, { backend: "reference" })).y.data, want.data);
  } finally {
    await server.shutdown();
    await other.shutdown();
  }
});

Deno.test("external data: a FIFO or a device as the data file is refused without waiting", async () => {
  if (Deno.build.os === "windows") return;
  const m = await referenceModel("mlp");
  const { bytes } = externalized(decodeModel(m.bytes));
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeFile(`${dir}/m.onnx`, bytes);
    const made = await new Deno.Command("mkfifo", { args: [`${dir}/weights.bin`] }).output();
    assert.ok(made.success, "mkfifo");
    await assert.rejects(() => OnnxModel.load(`${dir}/m.onnx`), typed(/not a regular file/));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("external data: sizes are checked against the budget before any byte is read", async () => {
  const m = await referenceModel("mlp");
  const proto = decodeModel(m.bytes);
  externalized(proto, "huge.bin");
  // Declared far larger than the budget; the file does not even exist, so a read would fail
  // with another error.
  const t = proto.graph.initializer[0];
  t.dims = [1 << 28];
  t.externalData = [{ key: "location", value: "huge.bin" }];
  const dir = await Deno.makeTempDir();
  setMemoryBudget({ maxTensorBytes: 1 << 20 });
  try {
    await Deno.writeFile(`${dir}/m.onnx`, encodeModel(proto));
    await assert.rejects(
      () => OnnxModel.load(`${dir}/m.onnx`),
      (e) =>
        e instanceof KilnError && e.code === "limit" && /over the memory budget/.test(e.message),
    );
  } finally {
    setMemoryBudget(undefined);
    await Deno.remove(dir, { recursive: true });
  }
});
