/**
 * wasm's f32 products in dot tiles against broadcast tiles (`WasmBackend`'s `dotTiles`), both
 * compiled in one process and their runs taken in turns, so that both meet the same moments of a
 * host whose speed moves between processes (the 2-core VM's products ran 1.4× apart from one
 * process to the next, session 95). Inputs are the `MODEL.in.NAME.DTYPE.bin` files beside each
 * model where there are, else zeros and ids 0. Kernel cache off.
 *
 *   deno run -A --config deno.json bench/dot_tiles_ab.ts MODEL.onnx ... [--threads N] [--rounds 40]
 *
 * Prints a line a model: each form's median run (ms) over `rounds` turns after 3 warm turns, and
 * dot ÷ broadcast.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { OnnxModel, WasmBackend } from "../mod.ts";
import { madeInputs } from "./model_inputs.ts";
import { interleavedTimes, median } from "./timed.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: { threads: { type: "string" }, rounds: { type: "string", default: "40" } },
  allowPositionals: true,
});
const threads = values.threads === undefined ? undefined : Number(values.threads);
const rounds = Number(values.rounds);

/** Raw input files beside `path` (`MODEL.in.NAME.DTYPE.bin`), by input name. */
async function filesBeside(path: string): Promise<Record<string, string>> {
  const at = path.lastIndexOf("/"), dir = at >= 0 ? path.slice(0, at) : ".";
  const stem = path.slice(at + 1).replace(/\.onnx$/, "");
  const files: Record<string, string> = {};
  for await (const entry of Deno.readDir(dir)) {
    const parts = entry.name.split(".");
    if (entry.name.startsWith(`${stem}.in.`) && parts.length === 5) {
      files[parts[2]] = `${dir}/${entry.name}`;
    }
  }
  return files;
}

for (const path of positionals) {
  const model = await OnnxModel.load(path);
  const inputs = await madeInputs(model.inputs, { files: await filesBeside(path) });
  const forms = [true, false].map((dotTiles) => new WasmBackend({ threads, dotTiles }));
  const exes = await Promise.all(
    forms.map((backend) => model.compile({}, { backend, cache: false })),
  );
  const runs = exes.map((exe) => () => exe.run(inputs));
  await interleavedTimes(runs, 3);
  const [dot, broadcast] = (await interleavedTimes(runs, rounds)).map(median);
  const name = path.slice(path.lastIndexOf("/") + 1);
  console.log(
    `${name}: dot ${dot.toFixed(3)} ms, broadcast ${broadcast.toFixed(3)} ms, dot ÷ broadcast ${
      (dot / broadcast).toFixed(3)
    }`,
  );
  for (const exe of exes) exe.dispose();
  for (const backend of forms) backend.dispose();
}
