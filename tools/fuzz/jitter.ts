/**
 * The fuzzer's probe for answers that hang on rounding: a graph whose every sum (reductions,
 * matmuls, convolutions) and every approximated function's result (Exp, Log, Pow, Erf, Sin, Cos)
 * is scaled by 1 ± 2^-22, two units in f32's last place either way, as a
 * device's other summation order may land. Where the reference's outputs follow such a nudge past the
 * tolerance, no backend's f32 answer is more right than another's there, and the fuzzer does not
 * compare it. Seed 45002's case 1236 (a ThresholdedRelu turning a channel constant before an
 * instance norm) was flagged as a wrong answer on WebGPU: the reference's f64 mean of a constant
 * channel was exact, the GPU's f32 sum a unit off, and each later norm of ε = 1e-5 multiplied
 * that difference by up to 300.
 *
 * @module
 */
import { boundaryOf, Graph, nodeSpecOf } from "../../jit/ir/graph.ts";
import { getOp } from "../../jit/ops/mod.ts";
import { decompose } from "../../jit/passes/decompose.ts";
import type { NodeSpec } from "../../jit/ir/graph.ts";

/** Relative size of the nudge: two units in the last place of an f32. */
const NUDGE = 2 ** -22;

/** Op categories whose results are sums a device may order otherwise. */
const SUMS = new Set(["reduce", "matmul", "conv"]);

/**
 * Ops whose results a device may round an ulp apart from the reference's correctly rounded ones
 * (seed 48003's case 13565: an Exp near 5·10⁴ one unit off, its Cos 3·10⁻³ apart).
 */
const APPROXIMATED = new Set(["Exp", "Log", "Pow", "Erf", "Sin", "Cos"]);

/**
 * `input`, its composite ops written out, with each float sum's result scaled by 1 + `sign` ·
 * {@linkcode NUDGE} (`sign` ±1: a difference's sign decides what a ReLU after it keeps); the
 * written-out graph if it has none.
 */
export function jittered(input: Graph, sign: 1 | -1): Graph {
  // Composites written out first: their sums (an instance norm's mean, a softmax's) are sums too.
  const graph = decompose(input, () => true);
  const float = (v: number) => graph.values[v].dtype === "f32";
  const summed = (op: string) => SUMS.has(getOp(op).category) || APPROXIMATED.has(op);
  if (!graph.nodes.some((n) => summed(n.op) && n.outputs.every(float))) return graph;
  const nodes: NodeSpec[] = [];
  for (const n of graph.nodes) {
    const spec = nodeSpecOf(graph, n);
    if (!summed(n.op) || !n.outputs.every(float)) {
      nodes.push(spec);
      continue;
    }
    const raw = spec.outputs.map((o) => `${o}~sum`);
    nodes.push({ ...spec, outputs: raw });
    spec.outputs.forEach((o, i) => {
      const scale = {
        data: new Float32Array([1 + sign * NUDGE]),
        shape: [],
        dtype: "f32" as const,
      };
      nodes.push({ op: "Constant", inputs: [], outputs: [`${o}~nudge`], attrs: { value: scale } });
      nodes.push({ op: "Mul", inputs: [raw[i], `${o}~nudge`], outputs: [o] });
    });
  }
  return Graph.create({ ...boundaryOf(graph), nodes });
}
