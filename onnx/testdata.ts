/**
 * Locates the shared reference models (`../shared/models` beside the checkout) for tests.
 *
 * @module
 */
import type { HostTensor } from "../jit/host_tensor.ts";

/** Directory of the shared models. */
export const MODELS_DIR: string = new URL("../../shared/models/", import.meta.url).pathname;

/** Names of the shared reference models. */
export const MODEL_NAMES: readonly string[] = ["mlp", "lenet", "transformer_block"];

/** A shared model with its fixed input and ONNX Runtime's output. */
export interface ReferenceModel {
  /** Path of the `.onnx` file. */
  readonly path: string;
  /** The model bytes. */
  readonly bytes: Uint8Array;
  /** Input `x`. */
  readonly x: HostTensor;
  /** ONNX Runtime's output `y`. */
  readonly y: Float32Array;
}

/** Loads a shared model and its recorded input/output. */
export async function referenceModel(name: string): Promise<ReferenceModel> {
  const meta = JSON.parse(await Deno.readTextFile(`${MODELS_DIR}models.json`));
  const [shape] = meta[name].inputs.x;
  const path = `${MODELS_DIR}${name}.onnx`;
  return {
    path,
    bytes: await Deno.readFile(path),
    x: {
      data: new Float32Array((await Deno.readFile(`${MODELS_DIR}${name}.in.x.float32.bin`)).buffer),
      shape,
      dtype: "f32",
    },
    y: new Float32Array((await Deno.readFile(`${MODELS_DIR}${name}.out.y.float32.bin`)).buffer),
  };
}
