/**
 * Locates the shared reference models (`../shared/models` beside the checkout) for tests.
 *
 * @module
 */
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { OnnxModel } from "./model.ts";
import { encodeModel, type GraphProto, type ValueInfoProto } from "./wire/proto.ts";

/**
 * Directory of the shared models: `../shared/models` beside the checkout, or `KILN_MODELS_DIR`
 * (the GPU machine gets a copy carried in `.device/models/`).
 */
export const MODELS_DIR: string = Deno.env.get("KILN_MODELS_DIR") ??
  new URL("../../shared/models/", import.meta.url).pathname;

/** Names of the shared reference models. */
export const MODEL_NAMES: readonly string[] = [
  "mlp",
  "lenet",
  "transformer_block",
  "shufflenet_v2_x0_5",
  "vit_tiny",
];

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

/**
 * A benchmark model of either set by name (`MODEL_NAMES` or `EXPORT_NAMES`): its bytes, inputs
 * by name and ONNX Runtime's recorded output `y`.
 */
export async function namedModel(name: string): Promise<ExportedModel> {
  if (!MODEL_NAMES.includes(name)) return await exportedModel(name);
  const m = await referenceModel(name);
  return { bytes: m.bytes, inputs: { x: m.x }, y: m.y };
}

/**
 * Directory of this repository's extra PyTorch exports (`onnx/testdata/`), or `KILN_EXPORTS_DIR`
 * (a directory of the same layout, e.g. what `testdata/export_zoo.py` wrote, with its entries
 * merged into one `models.json`).
 */
export const EXPORTS_DIR: string = Deno.env.get("KILN_EXPORTS_DIR") ??
  new URL("./testdata/", import.meta.url).pathname;

/** Names of the extra PyTorch exports. */
export const EXPORT_NAMES: readonly string[] = [
  "resnet_block",
  "mobile_block",
  "encoder_mask",
  "embedding_mlp",
  "unet",
  "decoder_causal",
  "lstm2",
  "gru_bi",
  "generator",
  "mobilenet_v2ish",
  "audio_conv1d",
  "misc_ops",
  // PyTorch's dynamo exporter (its default), opset 20: Split's num_outputs, ReduceMean's
  // noop_with_empty_axes, Gelu, GatherND, SDPA's pattern (`export_probe.py`).
  "gpt_dynamo",
  "llama_dynamo",
  "vgg_dynamo",
  "efficient_se_dynamo",
  // Quantized by ONNX Runtime's own tools (`export_probe3.py`): QOperator (QLinearConv and
  // com.microsoft's QGemm) and dynamic (DynamicQuantizeLinear, ConvInteger, MatMulInteger).
  "quant_qoperator",
  "quant_dynamic",
];

/** An extra PyTorch export with its recorded inputs (any names, f32 or i64) and ONNX Runtime's `y`. */
export interface ExportedModel {
  /** The model bytes. */
  readonly bytes: Uint8Array;
  /** Inputs by name. */
  readonly inputs: Record<string, HostTensor>;
  /** ONNX Runtime's output `y`. */
  readonly y: Float32Array;
}

/** Loads an extra PyTorch export and its recorded inputs and output. */
export async function exportedModel(name: string): Promise<ExportedModel> {
  const meta = JSON.parse(await Deno.readTextFile(`${EXPORTS_DIR}models.json`))[name];
  const read = async (file: string) =>
    (await Deno.readFile(`${EXPORTS_DIR}${file}`)).slice().buffer;
  const inputs: Record<string, HostTensor> = {};
  for (
    const [k, [shape, dtype]] of Object.entries(meta.inputs as Record<string, [number[], string]>)
  ) {
    const bytes = await read(`${name}.in.${k}.${dtype}.bin`);
    inputs[k] = dtype === "int64"
      ? { data: new BigInt64Array(bytes), shape, dtype: "i64" }
      : { data: new Float32Array(bytes), shape, dtype: "f32" };
  }
  return {
    bytes: await Deno.readFile(`${EXPORTS_DIR}${name}.onnx`),
    inputs,
    y: new Float32Array(await read(`${name}.out.y.float32.bin`)),
  };
}

/** A graph input or output of a test model: element type `elemType` and, if given, `dims`. */
export function valueInfo(
  name: string,
  elemType: number,
  dims?: readonly number[],
): ValueInfoProto {
  const shape = dims && { dim: dims.map((d) => ({ dimValue: d })) };
  return { name, type: { tensorType: { elemType, ...(shape ? { shape } : {}) } } };
}

/** Options of {@linkcode testModel}. */
export interface TestModelOptions {
  /** Whether the model also imports ONNX Runtime's `com.microsoft` domain (version 1). */
  readonly microsoft?: boolean;
}

/**
 * A test model of `graph` (named `g`) at opset 17 of the default domain, and version 1 of
 * `com.microsoft` when `microsoft` is set.
 */
export function testModel(
  graph: Omit<GraphProto, "name">,
  { microsoft = false }: TestModelOptions = {},
): OnnxModel {
  const contrib = microsoft ? [{ domain: "com.microsoft", version: 1 }] : [];
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }, ...contrib],
    graph: { name: "g", ...graph },
  }));
}
