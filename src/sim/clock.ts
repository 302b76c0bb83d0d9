/**
 * Time for the simulators: one monotonic epoch-ms clock (so ledger intervals never run backwards
 * when the wall clock is adjusted) and Go's RFC3339Nano formatting, which Ollama uses on the wire.
 */

/** Epoch milliseconds with sub-millisecond precision, monotonic for the life of the process. */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

/** Go's `time.Duration(math.MaxInt64)` in ms: what `keep_alive:-1` becomes (about 292 years). */
export const FOREVER_MS = 9223372036854.775;

function pad(n: number, width = 2): string {
  return String(n).padStart(width, "0");
}

/**
 * Formats like Go's `time.Time.MarshalJSON` (RFC3339Nano): nanoseconds with trailing zeros
 * trimmed, "Z" for a zero offset. `utc` picks UTC (Ollama's `created_at`) or the local zone
 * (`expires_at`, `modified_at`).
 */
export function formatGoTime(epochMs: number, utc: boolean): string {
  const whole = Math.floor(epochMs);
  const d = new Date(whole);
  let nanos = Math.round((epochMs - whole) * 1e6) + (whole % 1000) * 1e6;
  if (nanos > 999_999_999) nanos = 999_999_999;
  const offsetMin = utc ? 0 : -d.getTimezoneOffset();
  const local = new Date(whole + offsetMin * 60_000);
  const date = `${pad(local.getUTCFullYear(), 4)}-${pad(local.getUTCMonth() + 1)}-${pad(local.getUTCDate())}`;
  const time = `${pad(local.getUTCHours())}:${pad(local.getUTCMinutes())}:${pad(local.getUTCSeconds())}`;
  const frac = nanos === 0 ? "" : "." + String(nanos).padStart(9, "0").replace(/0+$/, "");
  let zone = "Z";
  if (offsetMin !== 0) {
    const abs = Math.abs(offsetMin);
    zone = `${offsetMin < 0 ? "-" : "+"}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
  }
  return `${date}T${time}${frac}${zone}`;
}
