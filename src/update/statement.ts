/**
 * The text a release signature covers. Signing the bytes alone would let anyone who can publish
 * a release (but holds no key) tag an old signed binary as a new version or as another platform's
 * asset; this text binds the tag and the asset name to the bytes' digest. The release tooling
 * (scripts/sign.ts) and the updater build it here, so they cannot drift apart. Pure.
 *
 *   gpu-turnstile release v1\n
 *   <tag>\n
 *   <asset name>\n
 *   <lower-case hex SHA-256 of the asset>\n
 */

export const STATEMENT_HEADER = "gpu-turnstile release v1";

/**
 * Why `tag` and `assetName` cannot go into a statement, or null. A field with a line break could
 * pose as the next field, so only printable ASCII is allowed.
 */
export function statementRefusal(tag: string, assetName: string): string | null {
  const printable = /^[\x20-\x7e]+$/;
  if (!printable.test(tag)) return `tag ${JSON.stringify(tag)} is not printable ASCII`;
  if (!printable.test(assetName)) return `asset name ${JSON.stringify(assetName)} is not printable ASCII`;
  return null;
}

/** The exact ASCII text `<asset>.sig` signs. Throws on a field statementRefusal() refuses. */
export function releaseStatement(tag: string, assetName: string, sha256Hex: string): string {
  const refusal = statementRefusal(tag, assetName) ?? (/^[0-9a-f]{64}$/.test(sha256Hex) ? null : `SHA-256 ${JSON.stringify(sha256Hex)} is not 64 lower-case hex digits`);
  if (refusal) throw new Error(`cannot build a release statement: ${refusal}`);
  return `${STATEMENT_HEADER}\n${tag}\n${assetName}\n${sha256Hex}\n`;
}
