/**
 * One clock for every process of the benchmark: epoch milliseconds with sub-millisecond
 * precision (the simulators stamp calls and NDJSON `created_at` the same way), so times taken
 * in the load generator, the upstream host and the simulators can be compared.
 */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Go's RFC3339Nano (Ollama's `created_at`) to epoch ms, keeping the sub-millisecond digits that
 * Date.parse drops. NaN when the text is not such a time.
 */
export function parseGoTime(s: string): number {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/.exec(s);
  if (!m) return Number.NaN;
  const whole = Date.parse(`${m[1]}${m[3]}`);
  const frac = m[2] ? Number(`0.${m[2]}`) * 1000 : 0;
  return whole + frac;
}
