/**
 * Sign release assets for one release tag with the Ed25519 key in RELEASE_SIGNING_KEY (PEM text):
 *
 *   <asset>.sig     raw 64-byte signature (`openssl pkeyutl -sign -rawin`) over the release
 *                   statement of src/update/statement.ts: the tag, the asset's file name and the
 *                   SHA-256 of its bytes
 *   <asset>.sha256  `<hex>  <name>` (sha256sum format)
 *
 * The file name is the release asset's name: sign the files under the names they are attached
 * with. Refuses when the key does not belong to the public key embedded in src/update/pubkey.ts
 * (binaries released with a key they cannot verify would never update again), and checks every
 * signature with the updater's own verifyAsset() before it writes the .sha256.
 *
 *   RELEASE_SIGNING_KEY="$(cat private.pem)" bun scripts/sign.ts --tag v1.2.3 dist/gpu-turnstile.exe …
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";
import { isVersion } from "../src/config/version.ts";
import { PUBLIC_KEY_BASE64 } from "../src/update/pubkey.ts";
import { releaseStatement } from "../src/update/statement.ts";
import { decodePublicKey, sha256Hex, verifyAsset } from "../src/update/verify.ts";
import { publicKeyFromPem } from "./pubkey-from-pem.ts";

export interface Signed {
  asset: string;
  sig: string;
  sha256File: string;
  sha256: string;
}

export interface SignOptions {
  /** files to sign; each one's base name is its release asset name */
  assets: string[];
  /** the release tag, vX.Y.Z */
  tag: string;
  /** the private key, PEM text */
  pem: string;
  /** the base64 key the released binaries embed; the signing key must match it */
  expectPublicKey: string;
}

export function signAssets(o: SignOptions): Signed[] {
  if (!isVersion(o.tag)) throw new Error(`tag ${JSON.stringify(o.tag)} is not vX.Y.Z: the updater accepts no other release`);
  const actual = publicKeyFromPem(o.pem);
  if (o.expectPublicKey === "") {
    throw new Error("src/update/pubkey.ts embeds no key: binaries released now could never verify an update (see docs/RELEASING.md)");
  }
  if (actual !== o.expectPublicKey) {
    throw new Error(`RELEASE_SIGNING_KEY belongs to public key ${actual}, but the binaries embed ${o.expectPublicKey}`);
  }
  const key = decodePublicKey(o.expectPublicKey);
  if ("refusal" in key) throw new Error(key.refusal);
  // openssl wants files; they live only as long as the signing, readable by us alone.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-sign-"));
  const keyFile = path.join(dir, "key.pem");
  try {
    fs.writeFileSync(keyFile, o.pem, { mode: 0o600 });
    return o.assets.map((asset) => signOne(asset, o.tag, keyFile, key.key, path.join(dir, "statement")));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function signOne(asset: string, tag: string, keyFile: string, publicKey: Uint8Array, statementFile: string): Signed {
  const name = path.basename(asset);
  const bytes = new Uint8Array(fs.readFileSync(asset));
  const sha256 = sha256Hex(bytes);
  fs.writeFileSync(statementFile, releaseStatement(tag, name, sha256));
  const sig = `${asset}.sig`;
  const r = spawnSync("openssl", ["pkeyutl", "-sign", "-rawin", "-inkey", keyFile, "-in", statementFile, "-out", sig], { encoding: "utf8" });
  if (r.error) throw new Error(`openssl could not run: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`openssl pkeyutl -sign failed for ${asset}: ${r.stderr.trim()}`);
  const verified = verifyAsset({ tag, assetName: name, asset: bytes, signature: new Uint8Array(fs.readFileSync(sig)), publicKey });
  if ("refusal" in verified) throw new Error(`the signature openssl wrote for ${asset} would be refused: ${verified.refusal}`);
  const sha256File = `${asset}.sha256`;
  fs.writeFileSync(sha256File, `${sha256}  ${name}\n`);
  return { asset, sig, sha256File, sha256 };
}

if (import.meta.main) {
  const usage = "usage: RELEASE_SIGNING_KEY=<PEM text> bun scripts/sign.ts --tag vX.Y.Z <asset>...";
  let args: { tag?: string; assets: string[] };
  try {
    const { values, positionals } = parseArgs({ options: { tag: { type: "string" } }, allowPositionals: true });
    args = { tag: values.tag, assets: positionals };
  } catch (err) {
    console.error(`sign: ${err instanceof Error ? err.message : String(err)}\n${usage}`);
    process.exit(2);
  }
  const pem = process.env.RELEASE_SIGNING_KEY ?? "";
  if (args.assets.length === 0 || !args.tag || pem.trim() === "") {
    console.error(usage);
    process.exit(2);
  }
  try {
    for (const s of signAssets({ assets: args.assets, tag: args.tag, pem, expectPublicKey: PUBLIC_KEY_BASE64 })) {
      console.log(`signed ${s.asset} for ${args.tag}  sha256 ${s.sha256}`);
    }
  } catch (err) {
    console.error(`sign: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
}
