/**
 * What fusion takes and gives: its options (the limits a backend's kernels must respect) and its
 * result (the kernels, the log of every boundary, the constants they read). See `fuse.ts`.
 *
 * @module
 */
import type { HostTensor } from "../ir/host_tensor.ts";
import type { KernelIR } from "../ir/kernel_ir.ts";
import { checkOptions } from "../support/errors.ts";

/** Options for `fuse`. */
export interface FuseOptions {
  /** Most input buffers one kernel may read (a backend's binding limit); default unlimited. */
  readonly maxInputs?: number;
  /** Largest expression (ALU ops) inlined into more than one consumer; default 16. */
  readonly maxSharedOps?: number;
  /**
   * Longest chain of ALU ops in one kernel; default 128. Code generators and the interpreter
   * recurse over expressions: a chain of thousands of Adds would overflow their stacks.
   */
  readonly maxDepth?: number;
  /**
   * Whether IntegerMatMul fuses as one integer matmul kernel (the backends have integer dot
   * products for it) instead of its decomposition; `"bytes"`: only over bytes (u8 by i8);
   * default false.
   */
  readonly integerDot?: boolean | "bytes";
  /**
   * Whether a contraction of a few rows reads its B's elementwise expression as it goes instead
   * of storing it first (see `inlineOperand`); default true.
   */
  readonly inlineOperands?: boolean;
  /**
   * Whether a BlockMatMul of few rows fuses as one matmul kernel tagged with its packed buffers
   * (the generator unpacks in registers) instead of its decomposition; default false.
   */
  readonly blockProducts?: boolean;
  /**
   * Whether a BlockMatMul of more rows stores its weight unpacked by a kernel tagged with its
   * packed buffers (a generator that knows the tag unpacks with vector shifts) instead of a
   * plain elementwise kernel, which may merge with others; default false.
   */
  readonly blockUnpacks?: boolean;
  /**
   * Whether a BlockMatMul of few rows whose A is an elementwise expression (or a view) computes A
   * in its own kernel as it reads it (`BlockProduct.prologue`) instead of storing it first;
   * default false.
   */
  readonly blockPrologues?: boolean;
  /**
   * Whether a DynamicQuantizeLinear's range (`RangeWithZero`) is two outputs of the kernel that
   * computes its input, combined as it goes (`KernelOutput.combine`), instead of its
   * decomposition's reductions; default false.
   */
  readonly combinedRanges?: boolean;
  /**
   * Whether a BlockMatMul that `rounds` A fuses as one block product kernel that rounds it
   * (`BlockProduct.roundsA`, `DeviceProfile.packedRows`) instead of its decomposition; default
   * false.
   */
  readonly roundingProducts?: boolean;
  /**
   * Rows up to which a BlockMatMul of A rounded to 8 bits (its `int8` attribute) fuses as one
   * block product kernel (`DeviceProfile.integerBlockRows`); default 4, as any block product.
   */
  readonly integerBlockRows?: number;
  /**
   * Least multiply-adds of a conv laid out as a GEMM whose patches are stored as a matrix of
   * their own before its product (im2col), instead of gathered as the product reads them
   * (`DeviceProfile.storedPatches`); default `Infinity`: never.
   */
  readonly patchesFrom?: number;
  /**
   * Whether a product of few outputs and a deep K (by a shared weight, or a conv whose patches
   * are stored) sums K in parts, each in a kernel's tiles of its own, added up by a second
   * kernel (`DeviceProfile.splitSums`); default false.
   */
  readonly splitSums?: boolean;
  /**
   * Whether an f16 conv of `patchesFrom` multiply-adds or more stores its patches whatever its
   * channels, so that its product runs as a plain one on the matrix units
   * (`DeviceProfile.matrixUnits`); default false.
   */
  readonly halfPatches?: boolean;
  /**
   * Least elements of a batched product's B read across its columns through a view (attention's
   * keys) from which it is stored along them first (`DeviceProfile.storedKeys`); default
   * `Infinity`: never.
   */
  readonly keysFrom?: number;
  /**
   * Whether every kernel is computed to the reference's bits (`KernelIR.exact`, the exact
   * precision): transcendentals decomposed, no attention groups, no block products, patches or
   * split sums; default false.
   */
  readonly exact?: boolean;
  /**
   * Graph inputs each run gives up (`CompileOptions.donate`): a `Where` that keeps one where it
   * lies is stored over it, its other branch computed only where the input does not stay
   * (`rareBranch`, with `keptStores`); default none.
   */
  readonly donated?: ReadonlySet<number>;
  /**
   * Whether the backends compute such a branch only where they store it
   * (`DeviceProfile.keptStores`), so it stays inline under a broadcast; default false.
   */
  readonly keptStores?: boolean;
}

/**
 * `options` checked by name (a misspelt key had been ignored without a word), with every default
 * filled in.
 */
export function withDefaults(options: FuseOptions): Required<FuseOptions> {
  checkOptions(options, FUSE_OPTIONS, "fuse()");
  return filled(options);
}

/** `options` with every default filled in. */
function filled(options: FuseOptions): Required<FuseOptions> {
  // The exact precision's kernels are the plain ones every backend sums in the same order.
  const exact = options.exact ?? false;
  if (exact) {
    options = {
      ...options,
      blockProducts: false,
      blockUnpacks: false,
      blockPrologues: false,
      combinedRanges: false,
      roundingProducts: false,
      patchesFrom: Infinity,
      splitSums: false,
      halfPatches: false,
    };
  }
  return {
    exact,
    maxInputs: options.maxInputs ?? Infinity,
    maxSharedOps: options.maxSharedOps ?? 16,
    maxDepth: options.maxDepth ?? 128,
    integerDot: options.integerDot ?? false,
    inlineOperands: options.inlineOperands ?? true,
    blockProducts: options.blockProducts ?? false,
    blockUnpacks: options.blockUnpacks ?? false,
    blockPrologues: options.blockPrologues ?? false,
    combinedRanges: options.combinedRanges ?? false,
    roundingProducts: options.roundingProducts ?? false,
    integerBlockRows: options.integerBlockRows ?? 4,
    patchesFrom: options.patchesFrom ?? Infinity,
    splitSums: options.splitSums ?? false,
    halfPatches: options.halfPatches ?? false,
    keysFrom: options.keysFrom ?? Infinity,
    donated: options.donated ?? new Set(),
    keptStores: options.keptStores ?? false,
  };
}

/** The kernels of a graph and the log of fusion decisions. */
export interface FusionResult {
  /** Kernels in execution order. */
  readonly kernels: KernelIR[];
  /** Why each boundary was placed, in order. */
  readonly log: string[];
  /** Constant buffers the kernels read (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
}

/** The option names `fuse()` takes: those its defaults fill. */
export const FUSE_OPTIONS: readonly string[] = Object.keys(filled({}));
