import "../../mod.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { OnnxModel } from "../model.ts";
import { exportedModel } from "../testdata.ts";

/** Recorded with ONNX Runtime by `testdata/export_rnn.py`: the forms ONNX's cases leave out. */
const RECURRENT = [
  "rnn_gru_bidir_lens",
  "rnn_gru_bidir_reset_after",
  "rnn_lstm_bidir_peep_clip",
  "rnn_lstm_bidir_acts",
  "rnn_rnn_bidir_acts",
  "rnn_lstm_reverse",
];

Deno.test("recurrences in both directions, with lengths, peepholes, clip and per-direction activations, match ONNX Runtime on every backend", async () => {
  for (const name of RECURRENT) {
    const m = await exportedModel(name);
    const model = OnnxModel.fromBytes(m.bytes);
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const { y } = await model.run(m.inputs, { backend, cache: false });
      assertClose(numbers(y.data), m.y, {
        atol: 1e-5,
        rtol: 1e-4,
        message: `${name} on ${backend}`,
      });
    }
  }
});
