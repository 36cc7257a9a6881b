/**
 * Telemetry: process-wide counters with stable names, as a flat map ready for Prometheus-style
 * export. Counters only grow; the kernel cache and the lazy-tensor cache report their own
 * figures, merged in by {@linkcode stats}.
 *
 * @module
 */
import { defaultKernelCache } from "./kernel_cache.ts";
import { realizeStats } from "./realize.ts";

/** Names of the counters kiln maintains itself. */
export type CounterName =
  | "kiln_runs_total"
  | "kiln_dispatches_total"
  | "kiln_compiles_total"
  | "kiln_compile_ms_total"
  | "kiln_bytes_uploaded_total"
  | "kiln_bytes_downloaded_total"
  | "kiln_transfers_total";

const counters: Record<CounterName, number> = {
  kiln_runs_total: 0,
  kiln_dispatches_total: 0,
  kiln_compiles_total: 0,
  kiln_compile_ms_total: 0,
  kiln_bytes_uploaded_total: 0,
  kiln_bytes_downloaded_total: 0,
  kiln_transfers_total: 0,
};

/** Adds `n` to a counter. */
export function count(name: CounterName, n = 1): void {
  counters[name] += n;
}

/** Every counter: kiln's own, the kernel cache's and the lazy-tensor cache's. */
export function stats(): Record<string, number> {
  const k = defaultKernelCache().stats();
  const r = realizeStats();
  return {
    ...counters,
    kiln_kernels_compiled_total: k.misses,
    kiln_codegen_ms_total: k.compileMs,
    kiln_kernel_cache_hits_total: k.hits,
    kiln_kernel_cache_misses_total: k.misses,
    kiln_kernel_cache_disk_hits_total: k.diskHits,
    kiln_kernel_cache_evictions_total: k.evictions,
    kiln_kernel_cache_entries: k.entries,
    kiln_tensor_cache_hits_total: r.hits,
    kiln_tensor_cache_misses_total: r.misses,
  };
}

/** The counters in Prometheus text exposition format. */
export function prometheusText(): string {
  return Object.entries(stats()).map(([name, value]) =>
    `# TYPE ${name} ${name.endsWith("_total") ? "counter" : "gauge"}\n${name} ${value}`
  ).join("\n") + "\n";
}
