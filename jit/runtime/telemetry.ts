/**
 * Telemetry: kiln's counters (`counters.ts`), the kernel cache's and the lazy-tensor cache's
 * figures as one flat map ready for Prometheus-style export. It sits above the core: the core
 * counts, this reads.
 *
 * @module
 */
import { defaultKernelCache } from "./kernel_cache.ts";
import { counterValues } from "./counters.ts";
import { realizeStats } from "../frontend/realize.ts";

/** Every counter: kiln's own, the kernel cache's and the lazy-tensor cache's. */
export function stats(): Record<string, number> {
  const k = defaultKernelCache().stats();
  const r = realizeStats();
  return {
    ...counterValues(),
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
