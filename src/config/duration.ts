/**
 * Go-style durations ("500ms", "60s", "1h30m", "1.5s"), because the SPEC and every existing
 * gpu-turnstile config file were written for Go's time.ParseDuration. Config keeps milliseconds;
 * the arithmetic runs on BigInt nanoseconds so "1.1s" or "3h0m0.001s" never pick up float noise.
 */

const NS_PER_UNIT: Readonly<Record<string, bigint>> = {
  ns: 1n,
  us: 1_000n,
  "\u00b5s": 1_000n, // µ MICRO SIGN (what Go prints)
  "\u03bcs": 1_000n, // μ GREEK SMALL LETTER MU (what keyboards often produce)
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

/** Go rejects durations that do not fit an int64 of nanoseconds; so do we. */
const MAX_NS = (1n << 63n) - 1n;

export class DurationError extends Error {
  override name = "DurationError";
}

/**
 * Parses a Go duration into milliseconds (possibly fractional below 1 ms).
 * Accepts a leading "+", but not "-": no setting has a use for a negative duration.
 * "0" is the only number allowed without a unit (as in Go).
 */
export function parseDuration(text: string): number {
  const s = text.trim();
  if (s === "") throw new DurationError("empty duration");
  let rest = s.startsWith("+") ? s.slice(1) : s;
  if (rest.startsWith("-")) throw new DurationError(`negative duration "${text}"`);
  if (rest === "0") return 0;
  if (rest === "") throw new DurationError(`invalid duration "${text}"`);

  let total = 0n;
  while (rest !== "") {
    const m = /^([0-9]*)(?:\.([0-9]*))?([^0-9.]*)/.exec(rest);
    const whole = m?.[1] ?? "";
    const frac = m?.[2] ?? "";
    const unit = m?.[3] ?? "";
    if (!m || (whole === "" && frac === "")) throw new DurationError(`invalid duration "${text}"`);
    if (unit === "" && m[0].length < rest.length) throw new DurationError(`invalid duration "${text}"`);
    if (unit === "") throw new DurationError(`missing unit in duration "${text}" (use ns, us, ms, s, m or h)`);
    const perUnit = NS_PER_UNIT[unit];
    if (perUnit === undefined) {
      throw new DurationError(`unknown unit "${unit}" in duration "${text}" (use ns, us, ms, s, m or h)`);
    }
    total += BigInt(whole === "" ? "0" : whole) * perUnit;
    if (frac !== "") total += (BigInt(frac) * perUnit) / 10n ** BigInt(frac.length);
    if (total > MAX_NS) throw new DurationError(`duration "${text}" is too large`);
    rest = rest.slice(m[0].length);
  }
  return nsToMs(total);
}

function nsToMs(ns: bigint): number {
  const whole = ns / 1_000_000n;
  const rem = ns % 1_000_000n;
  return Number(whole) + Number(rem) / 1e6;
}

/** Renders milliseconds the way Go's Duration.String does: "1h30m0s", "1m0s", "500ms", "1.5µs", "0s". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`cannot format duration ${ms}`);
  const neg = ms < 0;
  // Round to whole nanoseconds, Go's resolution.
  let u = BigInt(Math.round(Math.abs(ms) * 1e6));
  let out: string;
  if (u < 1_000_000_000n) {
    if (u === 0n) return "0s";
    if (u < 1_000n) out = `${u}ns`;
    else if (u < 1_000_000n) out = `${withFraction(u, 3)}\u00b5s`;
    else out = `${withFraction(u, 6)}ms`;
  } else {
    const secs = withFraction(u, 9);
    u /= 1_000_000_000n;
    const seconds = secs.replace(/^[0-9]+/, String(u % 60n));
    u /= 60n;
    if (u === 0n) out = `${seconds}s`;
    else if (u < 60n) out = `${u}m${seconds}s`;
    else out = `${u / 60n}h${u % 60n}m${seconds}s`;
  }
  return neg ? `-${out}` : out;
}

/** v / 10^prec as decimal text with trailing zeros (and a bare point) dropped, like Go's fmtFrac. */
function withFraction(v: bigint, prec: number): string {
  const scale = 10n ** BigInt(prec);
  const int = v / scale;
  const frac = (v % scale).toString().padStart(prec, "0").replace(/0+$/, "");
  return frac === "" ? `${int}` : `${int}.${frac}`;
}
