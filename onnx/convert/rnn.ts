/**
 * RNN, GRU and LSTM: kiln's ops of the same names (`jit/ops/recurrent.ts`), unrolled over the
 * sequence length the model is compiled for. The converter maps the attributes, reads
 * `sequence_lens` (known at compile time) as one, and names the optional inputs given.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  attribute,
  attrs,
  constInts,
  type Known,
  type NodeContext,
  typeOf,
} from "../import/node_context.ts";

/** The optional inputs after R, by ONNX's position: B, initial_h, initial_c, P. */
const OPTIONAL: [number, string][] = [[3, "b"], [5, "h"], [6, "c"], [7, "p"]];

/** Converts an RNN, GRU or LSTM node. */
function recurrent(kind: string) {
  return (c: NodeContext): Known[] => {
    const a = attrs(c), r = c.required(2);
    const lens = constInts(c, 4, "sequence_lens");
    const given = OPTIONAL.filter(([i]) => c.input(i));
    const listed = attribute(c, "activations")?.strings?.map((x) => new TextDecoder().decode(x));
    const hidden = a.int("hidden_size") ?? typeOf(r).shape[2];
    if (!(hidden > 0)) {
      throw new KilnError(`${c.label}: ${kind} without a hidden size`, {
        code: "bad-input",
        fix: "give hidden_size, or R of shape [dirs, gates · hidden, hidden]",
      });
    }
    const attributes = {
      direction: a.string("direction", "forward"),
      layout: a.int("layout", 0),
      hidden_size: hidden,
      clip: a.float("clip"),
      linear_before_reset: a.int("linear_before_reset", 0),
      input_forget: a.int("input_forget", 0),
      sequence_lens: lens,
      activations: listed?.join(","),
      activation_alpha: a.floats("activation_alpha"),
      activation_beta: a.floats("activation_beta"),
      present: given.map(([, name]) => name).join(","),
    };
    const defined = Object.fromEntries(
      Object.entries(attributes).filter(([, v]) => v !== undefined),
    );
    const inputs = [c.required(0), c.required(1), r, ...given.map(([i]) => c.input(i)!)];
    return c.emit(kind, inputs, defined, kind === "LSTM" ? 3 : 2);
  };
}

/** Converters by ONNX op type. */
export const RNN_CONVERTERS: Record<string, (c: NodeContext) => Known[]> = {
  RNN: recurrent("RNN"),
  GRU: recurrent("GRU"),
  LSTM: recurrent("LSTM"),
};
