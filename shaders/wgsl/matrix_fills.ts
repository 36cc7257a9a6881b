/**
 * How a matrix kernel (`matrix_matmul.ts`) moves its operands into workgroup memory: a tile of
 * each operand per K step, laid out like the operand in memory (K-contiguous operands, a row-major
 * A or a transposed B, as rows of K; the others as rows of M or N), each row padded by 16 bytes
 * so that consecutive threads read and store consecutive elements, at offsets worked out once
 * from the operand's affine view. Tiles hold f16 halves, or, for products over bytes, signed
 * bytes four to an i32 word (the i8 subgroup matrices' memory form).
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import type { Load } from "../../jit/ir/kernel_ir.ts";
import type { KernelLowering } from "./expr.ts";
import { allOf } from "./prelude.ts";

/** How a matrix kernel's operands sit in its tiles and on the matrix units. */
export interface MatrixElement {
  /** The operands' component type on the units. */
  readonly component: "f16" | "i8";
  /** The result matrices' component type, and the WGSL type of a sum. */
  readonly result: "f32" | "i32";
  /** K of one multiply: the configuration's 16×16×`mk`. */
  readonly mk: number;
  /** Bytes an element takes in a tile. */
  readonly size: 1 | 2;
  /** The tiles' WGSL element type: halves, or words of four bytes. */
  readonly array: "f16" | "i32";
}

/** f16 operands summed in f32 (the 16×16×16 configuration). */
export const HALVES: MatrixElement = {
  component: "f16",
  result: "f32",
  mk: 16,
  size: 2,
  array: "f16",
};

/** Signed-byte operands summed in i32 (the 16×16×32 configuration). */
export const BYTES: MatrixElement = {
  component: "i8",
  result: "i32",
  mk: 32,
  size: 1,
  array: "i32",
};

/** Bytes a tile row is padded by: rows start 16 bytes apart from the banks' pattern. */
export const PAD_BYTES = 16;

/**
 * An operand tile's fill: `load(k0)` reads a step into registers, `store()` puts it in the tile,
 * `matrix(type, row, kk)` loads the subgroup matrix of `type` at the tile's `row` (of M or N) and
 * K `kk` (a constant, or an expression where subgroups split the step's K); `size` is the tile's
 * length in elements (halves or bytes).
 */
export interface Fill {
  load(k0: string): void;
  store(): void;
  matrix(type: string, row: string, kk: number | string): string;
  readonly size: number;
}

/** What a tile's fill reads and where it puts it (see {@linkcode tileFill}). */
export interface FillSpec {
  /** The tile's workgroup array: `tileA` or `tileB`. */
  readonly name: string;
  readonly op: Load;
  /** The operand's output axis (M or N) in the kernel's space, its first in the tile, its size. */
  readonly ax: number;
  readonly o0: string;
  readonly bound: number;
  /** Tile rows (of M or N), the workgroup's threads, K a step. */
  readonly rows: number;
  readonly threads: number;
  readonly tk: number;
  /** Whether the operand is read four elements a load (`matrixVectors`). */
  readonly vector: boolean;
  readonly element: MatrixElement;
  /** Whether the operand's bytes are u8, stored less 128 as signed bytes. */
  readonly unsigned?: boolean;
}

/** A unit a thread moves each step: its row and K in the tile, offset and register. */
interface Unit {
  readonly r: string;
  readonly kq: string;
  readonly off: string;
  readonly reg: string;
}

/**
 * The fill of `o.name`: `tk` of K by `rows` (the operand's M or N from `o0`). A thread moves
 * units of 4 elements (one aligned load where `vector`; four bytes always, one tile word) or of
 * 1, unrolled into registers `${name}_${p}`; zero past `bound` and K (where not whole).
 */
export function tileFill(l: KernelLowering, o: FillSpec): Fill {
  const { e, coords: x, kernel } = l;
  const kAx = kernel.space.length - 1;
  const shape = kernel.inputs[o.op.input].shape;
  const access = affineOffset(o.op.steps, kernel.space, shape)!;
  const [wK, wR] = [access.weights[kAx], access.weights[o.ax]];
  const alongK = wK === 1;
  const bytes = o.element === BYTES;
  const V = o.vector || bytes ? 4 : 1;
  const stride = (alongK ? o.tk : o.rows) + PAD_BYTES / o.element.size;
  const across = (alongK ? o.tk : o.rows) / V;
  const count = (o.rows * o.tk) / V / o.threads;
  // The workgroup's origin in the operand, then each unit's row `r`, K `kq` and offset.
  const terms = access.weights.flatMap((w, d) => (w && d < kAx - 2 ? [`${w} * ${x[d]}`] : []));
  const origin = `${o.name}_at`;
  e.line(`let ${origin} = ${[String(access.base), ...terms, `${wR} * ${o.o0}`].join(" + ")};`);
  const register = bytes ? "u32" : V === 4 ? "vec4<f16>" : "f16";
  const units = [...Array(count).keys()].map((p): Unit => {
    const u = `(t + ${p * o.threads})`;
    const [r, kq] = alongK
      ? [`${u} / ${across}`, `${u} % ${across} * ${V}`]
      : [`${u} % ${across} * ${V}`, `${u} / ${across}`];
    const [rn, kn, on, reg] = ["r", "k", "o", ""].map((s) => `${o.name}_${s}${p}`);
    e.line(`let ${rn} = ${r};`);
    e.line(`let ${kn} = ${kq};`);
    e.line(`let ${on} = ${origin} + ${wR} * ${rn} + ${wK} * ${kn};`);
    e.line(`var ${reg}: ${register};`);
    return { r: rn, kq: kn, off: on, reg };
  });
  const geometry = { ...o, alongK, wK, wR, units };
  const load = bytes ? byteLoads(l, geometry) : halfLoads(l, geometry);
  const store = () => {
    for (const u of units) {
      const at = alongK ? `${u.r} * ${stride} + ${u.kq}` : `${u.kq} * ${stride} + ${u.r}`;
      if (bytes) e.line(`${o.name}[(${at}) / 4] = bitcast<i32>(${u.reg});`);
      else if (V === 1) e.line(`${o.name}[${at}] = ${u.reg};`);
      else for (let j = 0; j < 4; j++) e.line(`${o.name}[${at} + ${j}] = ${u.reg}[${j}];`);
    }
  };
  // The matrix's rows are the tile's `row…row+15` (M of a left, N of a right matrix), its K
  // `kk…kk+mk-1`: a left matrix is row-major where K is contiguous, a right one column-major.
  // Tint counts a load's offset and stride in the array's elements (a byte tile's words: its
  // 16-byte-aligned rows and matrices fall on whole words).
  const left = o.name === "tileA";
  const matrix = (type: string, row: string, kk: number | string) => {
    const major = alongK === left ? "row_major" : "col_major";
    const kRows = typeof kk === "number" ? `${kk * stride}` : `(${kk}) * ${stride}`;
    const at = alongK ? `(${row}) * ${stride} + ${kk}` : `${kRows} + ${row}`;
    const [offset, pitch] = bytes ? [`(${at}) / 4`, stride / 4] : [at, stride];
    return `subgroupMatrixLoad<${type}, ${major}>(&${o.name}, u32(${offset}), ${pitch}u)`;
  };
  return { load, store, matrix, size: (alongK ? o.rows : o.tk) * stride };
}

/** A fill's geometry: its spec, which axis is contiguous, the operand's weights and its units. */
interface Geometry extends FillSpec {
  readonly alongK: boolean;
  readonly wK: number;
  readonly wR: number;
  readonly units: readonly Unit[];
}

/** Whether a unit's element `j` (of the four along its row axis, or 0) lies inside the operand. */
function inside(l: KernelLowering, g: Geometry, u: Unit, k0: string, j = 0): string {
  const K = l.kernel.space[l.kernel.space.length - 1];
  const row = `${g.o0} + ${u.r}${j && !g.alongK ? ` + ${j}` : ""}`;
  return allOf(`${row} < ${g.bound}`, `${k0} + ${u.kq} < ${K}`);
}

/** Whether a fill's reads may pass the operand's edge (M, N or K not whole tiles). */
function guardedFill(l: KernelLowering, g: Geometry): boolean {
  const K = l.kernel.space[l.kernel.space.length - 1];
  return !(K % g.tk === 0 && g.bound % g.rows === 0);
}

/** The step loads of an f16 tile: a half, or a vec4 of four, a unit. */
function halfLoads(l: KernelLowering, g: Geometry): (k0: string) => void {
  const { e, kernel } = l;
  const V = g.vector ? 4 : 1;
  const input = l.inputs[g.op.input];
  const half = l.stored(kernel.inputs[g.op.input].dtype) === "f16";
  const read = (off: string) => {
    const at = V === 4 ? `${input}[u32(${off}) / 4u]` : `${input}[u32(${off})]`;
    return half ? at : `${V === 4 ? "vec4<f16>" : "f16"}(${at})`;
  };
  const guarded = guardedFill(l, g);
  return (k0) => {
    for (const u of g.units) {
      if (!guarded) {
        e.line(`${u.reg} = ${read(`${u.off} + ${g.wK} * (${k0})`)};`);
        continue;
      }
      // Reads stay in range: a unit past the bounds reads the origin's element, then zero.
      const ok = inside(l, g, u, k0);
      const at = read(`select(0, ${u.off} + ${g.wK} * (${k0}), ${ok})`);
      e.line(`${u.reg} = select(${V === 4 ? "vec4<f16>" : "f16"}(0.0), ${at}, ${ok});`);
    }
  };
}

/**
 * The step loads of a byte tile: four bytes a unit packed into one word (read as the word it
 * lies in where the operand is a packed constant, as one vec4 of 32-bit elements where aligned,
 * else element by element), u8 ones less 128 (each byte's top bit flipped). A zero past the
 * edge stays zero in the i8 operand, so that a u8 one's −128 there adds nothing.
 */
function byteLoads(l: KernelLowering, g: Geometry): (k0: string) => void {
  const { e, kernel } = l;
  const i = g.op.input;
  const signed = kernel.inputs[i].dtype === "i8";
  const [t, pack] = signed ? ["i32", "pack4xI8"] : ["u32", "pack4xU8"];
  const step = g.alongK ? g.wK : g.wR;
  const guarded = guardedFill(l, g);
  return (k0) => {
    for (const u of g.units) {
      const at = (j: number) => `${u.off} + ${g.wK} * (${k0})${j ? ` + ${step * j}` : ""}`;
      const ok = (j: number) => inside(l, g, u, k0, j);
      // Reads stay in range: an element past the bounds reads the origin's, then zero.
      const safe = (j: number) => guarded ? `select(0, ${at(j)}, ${ok(j)})` : at(j);
      let word: string;
      if (g.vector) {
        const quad = `${l.inputs[i]}[u32(${safe(0)}) / 4u]`;
        word = kernel.inputs[i].packed ? quad : `${pack}(${quad})`;
        if (guarded) word = `select(0u, ${word}, ${ok(0)})`;
      } else {
        const lanes = [0, 1, 2, 3].map((j) => {
          const v = l.element(i, `u32(${safe(j)})`);
          return guarded ? `select(${t}(0), ${v}, ${ok(j)})` : v;
        });
        word = `${pack}(vec4<${t}>(${lanes.join(", ")}))`;
      }
      e.line(`${u.reg} = ${word}${g.unsigned ? " ^ 0x80808080u" : ""};`);
    }
  };
}
