/**
 * Sign release assets with the Ed25519 key in RELEASE_SIGNING_KEY (PEM text):
 *
 *   <asset>.sig     raw 64-byte signature over the file's bytes (`openssl pkeyutl -sign -rawin`)
 *   <asset>.sha256  `<hex>  <name>` (sha256sum format)
 *
 * Refuses when the key does not belong to the public key embedded in src/update/pubkey.ts:
 * binaries released with a key they cannot verify would never update again.
 *
 *   RELEASE_SIGNING_KEY="$(cat private.pem)" bun scripts/sign.ts dist/gpu-turnstile.exe …
 */
import { spawnSync } from "node:child_process";
import { createHash, createPublicKey, verify } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { PUBLIC_KEY_BASE64 } from "../src/update/pubkey.ts";
import { publicKeyFromPem } from "./pubkey-from-pem.ts";

export interface Signed {
  asset: string;
  sig: string;
  sha256File: string;
  sha256: string;
}

/** `expectPublicKey`: the base64 key the released binaries embed; the signing key must match it. */
export function signAssets(assets: string[], pem: string, expectPublicKey: string): Signed[] {
  const actual = publicKeyFromPem(pem);
  if (expectPublicKey === "") {
    throw new Error("src/update/pubkey.ts embeds no key: binaries released now could never verify an update (see docs/RELEASING.md)");
  }
  if (actual !== expectPublicKey) {
    throw new Error(`RELEASE_SIGNING_KEY belongs to public key ${actual}, but the binaries embed ${expectPublicKey}`);
  }
  // openssl wants a key file; it lives only as long as the signing, readable by us alone.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-sign-"));
  const keyFile = path.join(dir, "key.pem");
  try {
    fs.writeFileSync(keyFile, pem, { mode: 0o600 });
    return assets.map((asset) => signOne(asset, keyFile, pem));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function signOne(asset: string, keyFile: string, pem: string): Signed {
  const sig = `${asset}.sig`;
  const r = spawnSync("openssl", ["pkeyutl", "-sign", "-rawin", "-inkey", keyFile, "-in", asset, "-out", sig], { encoding: "utf8" });
  if (r.error) throw new Error(`openssl could not run: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`openssl pkeyutl -sign failed for ${asset}: ${r.stderr.trim()}`);
  const bytes = fs.readFileSync(asset);
  const signature = fs.readFileSync(sig);
  if (signature.byteLength !== 64 || !verify(null, bytes, createPublicKey(pem), signature)) {
    throw new Error(`the signature openssl wrote for ${asset} does not verify`);
  }
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  const sha256File = `${asset}.sha256`;
  fs.writeFileSync(sha256File, `${sha256}  ${path.basename(asset)}\n`);
  return { asset, sig, sha256File, sha256 };
}

if (import.meta.main) {
  const assets = process.argv.slice(2);
  const pem = process.env.RELEASE_SIGNING_KEY ?? "";
  if (assets.length === 0 || pem.trim() === "") {
    console.error("usage: RELEASE_SIGNING_KEY=<PEM text> bun scripts/sign.ts <asset>...");
    process.exit(2);
  }
  try {
    for (const s of signAssets(assets, pem, PUBLIC_KEY_BASE64)) console.log(`signed ${s.asset}  sha256 ${s.sha256}`);
  } catch (err) {
    console.error(`sign: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
}
