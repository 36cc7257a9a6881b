/**
 * The command line's usage text.
 *
 * @module
 */
import { VERSION } from "../jit/support/version.ts";

/** The CLI's usage text, printed by `kiln help` and every command's --help. */
export const HELP: string = `kiln ${VERSION}: a JIT codegen runtime for tensor compute graphs

Usage:
  kiln run [MODEL.onnx] [--backend auto|ID] [--input NAME=FILE.bin ...] [--shape NAME=2x3 ...]
           [--save DIR] [--runs N] [--json] [--explain] [--quiet]
           [--precision f32|f16-storage|f16|exact] [--narrow-f64]
      Compile and run MODEL (default: the built-in demo MLP). Inputs are raw little-endian files
      in the model's dtype; missing inputs are seeded random. --save writes DIR/<output>.bin and
      DIR/outputs.json. --precision f16 (or f16-storage) stores floats in 16 bits (natively on a
      GPU with shader-f16, as 16-bit words elsewhere); inputs and outputs stay f32. --precision
      exact gives every backend the reference's bits (fixed summation order, slower). --narrow-f64
      lets a backend without f64 (webgpu) compute a double model in f32; inputs and outputs stay
      f64. A compile that takes over a second shows its phases on stderr (--quiet or --json: none).
  kiln explain [MODEL.onnx] [--backend auto|ID] [--shape NAME=2x3 ...] [--json] [--dot FILE]
               [--svg FILE] [--wat]
      The fusion and placement plan; --dot writes it for Graphviz, --svg draws it with dot,
      --wat prints each wasm kernel as WebAssembly text (through Binaryen, fetched on first use).
  kiln bench [MODEL.onnx] [--backends ID,ID] [--runs N] [--warmup N] [--threads N] [--json]
             [--input NAME=FILE.bin ...] [--shape NAME=2x3 ...]
             [--precision f32|f16-storage|f16|exact] [--narrow-f64]
      Compile time, first run, median and p90 run time per backend (after --warmup runs, default
      3; --threads sizes the wasm backend's thread pool; --backend ID is one backend; inputs as
      kiln run reads them, missing ones seeded random). After the
      first run, each run (of run and bench) writes its outputs into the previous run's arrays.
  kiln info [MODEL.onnx] [--json]
      Backends, device profiles, cache location and size; with a model, its summary: producer,
      opsets, inputs and outputs, parameters, op histogram and ops kiln cannot import.
  kiln generate MODEL.onnx --prompt-ids 1,2,3 | --prompt TEXT [--max-new N] [--backend auto|ID]
                [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop-ids 2,0]
                [--capacity N] [--json]
      Generates token ids with an ONNX decoder (past_key_values inputs, present outputs): prints
      ids as they come, then prefill and decode tokens/s. Greedy unless --temperature is over 0.
      --prompt encodes text with the tokenizer.json beside the model (@huggingface/tokenizers),
      prints text and stops at its config's eos_token.
  kiln --version
      The version. Every command takes --help.

Every command takes --gpu auto|dawn|navigator: the WebGPU implementation (default: KILN_GPU, else
auto: Dawn on a hardware GPU where the webgpu npm package loads, else navigator, Deno's own).
Dawn's readback takes microseconds where Deno's sleeps 10 ms. KILN_DAWN_FLAGS passes Dawn its
flags (backend=opengles where only EGL is).

Exit codes: 0 ok, 1 bad input (a message with a Fix:), 2 usage (unknown command or option),
70 an unexpected error (KILN_DEBUG=1 prints its stack).
`;
