/**
 * ONNX interchange: import models into kiln graphs, and run them.
 *
 * @module
 */
export { importOnnx, type OnnxImportOptions } from "./import/import.ts";
export { OPSETS } from "./import/declarations.ts";
export type { OnnxInputInfo } from "./import/inputs.ts";
export { type OnnxLoadOptions, OnnxModel, type OnnxValue } from "./model.ts";
export { KILN_DOMAIN, type OnnxOpMapping, registerOnnxOp } from "./import/registered_ops.ts";
export type { ModelSummary, ValueSummary } from "./import/summary.ts";
export type { StringTensor } from "./import/string_ops.ts";
export { toOnnx } from "./export/export.ts";
export {
  generate,
  type GenerateOptions,
  Generation,
  type GenerationStats,
} from "./generate/generate.ts";
export type { CacheLayout } from "./generate/decoder.ts";
export type { SamplingOptions } from "./generate/sampling.ts";
