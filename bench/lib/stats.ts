/** Order statistics over samples. Pure. */

/** Nearest-rank percentile (p in 0..100) of `xs`; NaN for no samples. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * s.length);
  return s[Math.min(s.length - 1, Math.max(0, rank - 1))]!;
}

export function median(xs: readonly number[]): number {
  return percentile(xs, 50);
}

export interface Summary {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarize(xs: readonly number[]): Summary {
  const mean = xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
  return {
    n: xs.length,
    min: percentile(xs, 0),
    p50: percentile(xs, 50),
    p90: percentile(xs, 90),
    p99: percentile(xs, 99),
    max: percentile(xs, 100),
    mean,
  };
}
