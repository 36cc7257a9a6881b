/**
 * The decoder a generation loop runs: the model as exported, with outputs a loop needs and no
 * others. The last position's logits (`kiln_last_logits`, `[batch, vocabulary]`) and their
 * argmax (`kiln_argmax`, the greedy token) are computed on the device, so a greedy step reads
 * back one id. Where the cache has a fixed capacity, each present output (the past with the new
 * entries appended) is brought back to that capacity (`kiln_next.<past>`): a `kiln_kept` input
 * says which slots keep their past entry, and `kiln_slots` which of the new entries each other slot
 * takes; the result is next step's past, the same shape every step, read from the past only at
 * each slot's own point (so a donated past is written in place). A `packed` cache needs none of
 * that: its present, as long as the capacity, is the next past (see `StepForm.shared`).
 *
 * @module
 */
import {
  CODE_OF_DTYPE,
  type ModelProto,
  type NodeProto,
  protoOf,
  type TensorProto,
  type ValueInfoProto,
} from "../wire/proto.ts";
import type { Decoder } from "./decoder.ts";

/** Names the step model adds. */
export const STEP = {
  /** Input: for each cache slot that takes a new entry, which of them (`int64 [capacity]`). */
  slots: "kiln_slots",
  /** Input: whether each cache slot keeps its own entry (`bool [1, 1, capacity, 1]`). */
  kept: "kiln_kept",
  /** Output: the last position's logits. */
  last: "kiln_last_logits",
  /** Output: their argmax. */
  argmax: "kiln_argmax",
  /** Output: the `topK` largest of them, largest first (where the step keeps a top k). */
  topValues: "kiln_top_values",
  /** Output: the ids of those. */
  topIds: "kiln_top_ids",
  /** Output: the argmax as the next step's ids input (`[batch, 1]`, its dtype). */
  nextIds: "kiln_next_ids",
  /** Output: the next past of cache input `past`. */
  next: (past: string): string => `kiln_next.${past}`,
} as const;

const INT64 = CODE_OF_DTYPE.i64;

/** How a step model is made. */
export interface StepForm {
  /** Whether the caches are kept at a fixed capacity (gathered through `kiln_slots`). */
  readonly capacity: boolean;
  /**
   * Whether each present output is the next past as it is (a `packed` cache whose mask is as wide
   * as the capacity: GroupQueryAttention writes the new entries after the valid ones, in a
   * present as long as the past), so no gather and no `kiln_slots`.
   */
  readonly shared?: boolean;
  /** A top k of the last logits computed on the device, for sampling among them. */
  readonly topK?: number;
  /**
   * The argmax also as the next step's ids (`STEP.nextIds`), so a greedy step can start on the
   * device before its token is read back.
   */
  readonly feedback?: boolean;
}

/**
 * `model` turned into a generation step: caches at a fixed capacity or returned as the present
 * outputs are, and the last logits' argmax and, where asked, their top k.
 */
export function stepProto(model: ModelProto, decoder: Decoder, form: StepForm): ModelProto {
  const { capacity, topK } = form;
  const g = model.graph;
  const lastIndex = "kiln_last_index";
  const nodes: NodeProto[] = [
    {
      opType: "Gather",
      input: [decoder.logits, lastIndex],
      output: [STEP.last],
      attribute: [{ name: "axis", type: 2, i: 1 }],
    },
    {
      opType: "ArgMax",
      input: [STEP.last],
      output: [STEP.argmax],
      attribute: [{ name: "axis", type: 2, i: 1 }, { name: "keepdims", type: 2, i: 0 }],
    },
  ];
  const logitsType = g.output.find((o) => o.name === decoder.logits)?.type?.tensorType?.elemType;
  const outputs: ValueInfoProto[] = [
    { name: STEP.last, type: { tensorType: { elemType: logitsType ?? CODE_OF_DTYPE.f32 } } },
    { name: STEP.argmax, type: { tensorType: { elemType: INT64 } } },
  ];
  const gathered = capacity && !form.shared;
  const initializer = [
    ...g.initializer,
    protoOf(lastIndex, { data: BigInt64Array.of(-1n), shape: [], dtype: "i64" }),
  ];
  for (const c of decoder.caches) {
    if (gathered) continue;
    outputs.push({ name: c.present, type: { tensorType: { elemType: CODE_OF_DTYPE[c.dtype] } } });
  }
  if (gathered) {
    const next = nextPasts(decoder);
    nodes.push(...next.nodes);
    outputs.push(...next.outputs);
    initializer.push(...next.initializer);
  }
  if (topK !== undefined) {
    // Sampling then reads 2k numbers a token, not the whole vocabulary's logits.
    initializer.push(
      protoOf("kiln_top_k", { data: BigInt64Array.of(BigInt(topK)), shape: [1], dtype: "i64" }),
    );
    nodes.push({
      opType: "TopK",
      input: [STEP.last, "kiln_top_k"],
      output: [STEP.topValues, STEP.topIds],
      attribute: [{ name: "axis", type: 2, i: 1 }],
    });
    outputs.push(
      { name: STEP.topValues, type: { tensorType: { elemType: logitsType ?? CODE_OF_DTYPE.f32 } } },
      { name: STEP.topIds, type: { tensorType: { elemType: INT64 } } },
    );
  }
  if (form.feedback) {
    const idsType = g.input.find((i) => i.name === decoder.ids)?.type?.tensorType?.elemType;
    const axes = "kiln_feedback_axes";
    initializer.push(protoOf(axes, { data: BigInt64Array.of(1n), shape: [1], dtype: "i64" }));
    const column = idsType === INT64 ? STEP.nextIds : "kiln_next_ids_i64";
    nodes.push({
      opType: "Unsqueeze",
      input: [STEP.argmax, axes],
      output: [column],
      attribute: [],
    });
    if (column !== STEP.nextIds) {
      nodes.push({
        opType: "Cast",
        input: [column],
        output: [STEP.nextIds],
        attribute: [{ name: "to", type: 2, i: idsType ?? INT64 }],
      });
    }
    outputs.push({ name: STEP.nextIds, type: { tensorType: { elemType: idsType ?? INT64 } } });
  }
  const slots = [
    { name: STEP.slots, type: { tensorType: { elemType: INT64 } } },
    { name: STEP.kept, type: { tensorType: { elemType: CODE_OF_DTYPE.bool } } },
  ];
  return {
    ...model,
    graph: {
      ...g,
      node: [...(form.shared ? g.node.map(sharingBuffer) : g.node), ...nodes],
      initializer,
      input: gathered ? [...g.input, ...slots] : g.input,
      output: outputs,
    },
  };
}

/**
 * `node` told that its past and present share a buffer, where it is a GroupQueryAttention (a
 * `shared` step's): as onnxruntime-genai binds them, the present keeps the past's entries after
 * the new one, so a donated past is written in place one entry a step (`jit/ops/gqa.ts`).
 */
function sharingBuffer(node: NodeProto): NodeProto {
  if (node.opType !== "GroupQueryAttention") return node;
  const attribute = node.attribute.filter((a) => a.name !== "past_present_share_buffer");
  return {
    ...node,
    attribute: [...attribute, { name: "past_present_share_buffer", type: 2, i: 1 }],
  };
}

/**
 * The next pasts of an appended layout's caches (the present: the past, then the new entries),
 * at the capacity: the past where a slot keeps its entry (`kiln_kept`), else the new entry the
 * slot takes (`kiln_slots`), among the present's last (as many as the ids). The past is read only
 * at each slot's own point, so a donated one is written in place.
 */
function nextPasts(decoder: Decoder): {
  nodes: NodeProto[];
  outputs: ValueInfoProto[];
  initializer: TensorProto[];
} {
  const one = (name: string, v: bigint) =>
    protoOf(name, { data: BigInt64Array.of(v), shape: [1], dtype: "i64" });
  const initializer = [
    one("kiln_one", 1n),
    one("kiln_two", 2n),
    one("kiln_fresh_end", 2n ** 31n - 1n),
    one("kiln_fresh_axis", 2n),
  ];
  const nodes: NodeProto[] = [
    { opType: "Shape", input: [decoder.ids], output: ["kiln_ids_shape"], attribute: [] },
    {
      opType: "Slice",
      input: ["kiln_ids_shape", "kiln_one", "kiln_two"],
      output: ["kiln_new_count"],
      attribute: [],
    },
    { opType: "Neg", input: ["kiln_new_count"], output: ["kiln_fresh_start"], attribute: [] },
  ];
  const outputs: ValueInfoProto[] = [];
  for (const c of decoder.caches) {
    const [fresh, taken] = [`kiln_fresh.${c.past}`, `kiln_taken.${c.past}`];
    nodes.push(
      {
        opType: "Slice",
        input: [c.present, "kiln_fresh_start", "kiln_fresh_end", "kiln_fresh_axis"],
        output: [fresh],
        attribute: [],
      },
      {
        opType: "Gather",
        input: [fresh, STEP.slots],
        output: [taken],
        attribute: [{ name: "axis", type: 2, i: 2 }],
      },
      {
        opType: "Where",
        input: [STEP.kept, c.past, taken],
        output: [STEP.next(c.past)],
        attribute: [],
      },
    );
    const type = { tensorType: { elemType: CODE_OF_DTYPE[c.dtype] } };
    outputs.push({ name: STEP.next(c.past), type });
  }
  return { nodes, outputs, initializer };
}
