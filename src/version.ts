/**
 * The version this binary was built as. build.ts stamps it (`git describe`, or `v0.0.0-dev+<sha>`
 * for a tree without tags); running from source has no stamp and reads "dev".
 */
import { parseVersion } from "./config/version.ts";

/** What an unstamped program (run from source, not built by build.ts) reports. */
export const UNSTAMPED_VERSION = "dev";

export const VERSION: string =
  typeof __GPU_TURNSTILE_VERSION__ !== "undefined" ? __GPU_TURNSTILE_VERSION__ : UNSTAMPED_VERSION;

/**
 * Only an exact release tag `vX.Y.Z` (other than v0.0.0) is a release; everything else —
 * "dev", `v0.0.0-dev+<sha>`, `v1.2.3-4-gabc` (commits after a tag), `-dirty` — cannot be
 * ordered against releases and counts as dev.
 */
export function isDevVersion(v: string): boolean {
  const parsed = parseVersion(v);
  return parsed === null || parsed.every((n) => n === 0);
}
