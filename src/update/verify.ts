/**
 * Is this the binary the release key signed for this tag and this asset name? SHA-256 (when the
 * release carries a `.sha256`) catches a damaged download with a readable message; the Ed25519
 * signature over the release statement (statement.ts: tag, asset name, SHA-256 of the download)
 * is what actually grants trust.
 */
import nacl from "tweetnacl";
import { createHash } from "node:crypto";
import { releaseStatement, statementRefusal } from "./statement.ts";

export const SIGNATURE_BYTES = 64;

/** The embedded key as 32 raw bytes, or a reason it cannot be used. "" means "no key". */
export function decodePublicKey(base64: string): { key: Uint8Array } | { refusal: string } {
  if (base64.trim() === "") return { refusal: "this build has no embedded release key" };
  const key = Buffer.from(base64.trim(), "base64");
  if (key.byteLength !== nacl.sign.publicKeyLength) {
    return { refusal: `the embedded release key is ${key.byteLength} bytes, not ${nacl.sign.publicKeyLength}` };
  }
  return { key: new Uint8Array(key) };
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * The hex digest from a sha256sum-style line (`<hex>  <name>`, `<hex> *<name>`, or the bare
 * hex). A line naming another file is refused: that digest is not about this asset.
 */
export function parseSha256File(text: string, assetName: string): { hex: string } | { refusal: string } {
  const line = text.split(/\r?\n/).find((l) => l.trim() !== "") ?? "";
  const m = /^([0-9a-fA-F]{64})(?:\s+\*?(.+?))?\s*$/.exec(line);
  if (!m?.[1]) return { refusal: `${assetName}.sha256 is not a sha256sum line` };
  if (m[2] !== undefined && m[2] !== assetName) {
    return { refusal: `${assetName}.sha256 is for ${JSON.stringify(m[2])}, not ${assetName}` };
  }
  return { hex: m[1].toLowerCase() };
}

export interface VerifyInput {
  /** the release tag the updater acts on */
  tag: string;
  assetName: string;
  asset: Uint8Array;
  signature: Uint8Array;
  /** contents of `<asset>.sha256`, when the release has one */
  sha256File?: string;
  publicKey: Uint8Array;
}

/** The download's SHA-256 when the asset is verified, else the exact reason it is refused. */
export function verifyAsset(i: VerifyInput): { sha256: string } | { refusal: string } {
  const refusal = statementRefusal(i.tag, i.assetName);
  if (refusal) return { refusal };
  const actual = sha256Hex(i.asset);
  if (i.sha256File !== undefined) {
    const parsed = parseSha256File(i.sha256File, i.assetName);
    if ("refusal" in parsed) return parsed;
    if (actual !== parsed.hex) return { refusal: `SHA-256 mismatch for ${i.assetName}: release says ${parsed.hex}, download is ${actual}` };
  }
  if (i.signature.byteLength !== SIGNATURE_BYTES) {
    return { refusal: `${i.assetName}.sig is ${i.signature.byteLength} bytes, not ${SIGNATURE_BYTES}` };
  }
  const statement = new TextEncoder().encode(releaseStatement(i.tag, i.assetName, actual));
  if (!nacl.sign.detached.verify(statement, i.signature, i.publicKey)) {
    // Another tag, another asset name, the bytes alone, or another key: all look the same here.
    return {
      refusal: `signature of ${i.assetName} does not verify against the embedded release key (checked for tag ${i.tag}, asset ${i.assetName}, SHA-256 ${actual})`,
    };
  }
  return { sha256: actual };
}
