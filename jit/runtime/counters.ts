/**
 * Process-wide counters with stable names, counted by the core (compiles, runs, dispatches,
 * transfers). They only grow; `stats()` (telemetry) merges them with the caches' figures.
 *
 * @module
 */

/** Names of the counters kiln maintains itself. */
export type CounterName =
  | "kiln_runs_total"
  | "kiln_dispatches_total"
  | "kiln_compiles_total"
  | "kiln_compile_ms_total"
  | "kiln_bytes_uploaded_total"
  | "kiln_bytes_downloaded_total"
  | "kiln_transfers_total"
  | "kiln_worker_pieces_total"
  /** Kernels the wasm backend's optimizing tier moved to Binaryen's code (`optimizing_tier.ts`). */
  | "kiln_wasm_tier_swaps_total"
  /**
   * Bytes the wasm backend copied between the host and its arenas: arguments written, outputs
   * read, device tensors moved out (`arena_storage.ts`).
   */
  | "kiln_wasm_host_bytes_total"
  /**
   * Of those, the bytes of params and constants (a model's weights) written: once for all the
   * programs of one model, which share them in one memory (`arena_share.ts`).
   */
  | "kiln_wasm_weight_bytes_total";

const counters: Record<CounterName, number> = {
  kiln_runs_total: 0,
  kiln_dispatches_total: 0,
  kiln_compiles_total: 0,
  kiln_compile_ms_total: 0,
  kiln_bytes_uploaded_total: 0,
  kiln_bytes_downloaded_total: 0,
  kiln_transfers_total: 0,
  kiln_worker_pieces_total: 0,
  kiln_wasm_tier_swaps_total: 0,
  kiln_wasm_host_bytes_total: 0,
  kiln_wasm_weight_bytes_total: 0,
};

/** Adds `n` to a counter. */
export function count(name: CounterName, n = 1): void {
  counters[name] += n;
}

/** A copy of every counter. */
export function counterValues(): Record<CounterName, number> {
  return { ...counters };
}
