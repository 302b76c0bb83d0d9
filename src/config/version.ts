/** Release versions are exactly `vX.Y.Z`; `v0.0.0` is what a dev build stamps. */

export type Version = readonly [major: number, minor: number, patch: number];

export const DEV_VERSION = "v0.0.0";

const VERSION = /^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/;

/** `vX.Y.Z` → its three numbers, or null for anything else (no prerelease or build suffixes). */
export function parseVersion(text: string): Version | null {
  const m = VERSION.exec(text);
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

export function isVersion(text: string): boolean {
  return parseVersion(text) !== null;
}

/** Numeric comparison (v1.10.0 > v1.9.0): negative, 0 or positive. Throws on a non-version. */
export function compareVersions(a: string, b: string): number {
  const va = parseVersion(a);
  const vb = parseVersion(b);
  if (!va) throw new RangeError(`not a vX.Y.Z version: ${JSON.stringify(a)}`);
  if (!vb) throw new RangeError(`not a vX.Y.Z version: ${JSON.stringify(b)}`);
  for (let i = 0; i < 3; i++) {
    const d = (va[i] ?? 0) - (vb[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}
