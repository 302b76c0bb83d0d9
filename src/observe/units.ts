/**
 * Human units for text logs. JSON logs carry numbers (`*_ms`, `*_bytes`); the text format turns
 * those same fields into these, so a call site writes one number and each format shows it its way.
 */

/** `0.4ms`, `12.3ms`, `1.25s`, `2m03s`, `1h02m` — short, and sortable by eye within a unit. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "–";
  if (ms < 1000) return `${ms.toFixed(1)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)}s`;
  const totalS = Math.floor(ms / 1000);
  if (totalS < 3600) return `${Math.floor(totalS / 60)}m${String(totalS % 60).padStart(2, "0")}s`;
  const totalM = Math.floor(totalS / 60);
  return `${Math.floor(totalM / 60)}h${String(totalM % 60).padStart(2, "0")}m`;
}

/** `0B`, `512B`, `12.3KiB`, `4.6MiB`, `1.2GiB`: one decimal, the unit switched before it would read 1024.0. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n}B`;
  let v = n / 1024;
  for (const unit of ["KiB", "MiB"]) {
    if (v < 1023.95) return `${v.toFixed(1)}${unit}`;
    v /= 1024;
  }
  return `${v.toFixed(1)}GiB`;
}
