/**
 * Real `openssl pkeyutl -sign -rawin` signatures verify in the updater: the release tooling and
 * tweetnacl agree on the format (raw 64-byte Ed25519 over the file bytes, raw 32-byte key).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { checkOnce } from "../../src/update/check.ts";
import { PUBLIC_KEY_BASE64 } from "../../src/update/pubkey.ts";
import { decodePublicKey, verifyAsset } from "../../src/update/verify.ts";
import { publicKeyFromPem } from "../../scripts/pubkey-from-pem.ts";
import { signAssets } from "../../scripts/sign.ts";
import { startFakeGitea } from "./fake-gitea.ts";
import { ASSET, binary, captureLog, fakeInstall } from "./helpers.ts";

const repoRoot = path.resolve(import.meta.dir, "../..");
let dir: string;
let pem: string;
let pubkey: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-openssl-"));
  execFileSync("openssl", ["genpkey", "-algorithm", "ed25519", "-out", path.join(dir, "private.pem")]);
  pem = fs.readFileSync(path.join(dir, "private.pem"), "utf8");
  pubkey = publicKeyFromPem(pem);
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

test("pubkey-from-pem gives the raw key openssl's DER export ends with, from private or public PEM", () => {
  const der = execFileSync("openssl", ["pkey", "-in", path.join(dir, "private.pem"), "-pubout", "-outform", "DER"]);
  expect(pubkey).toBe(der.subarray(der.byteLength - 32).toString("base64"));
  const publicPem = execFileSync("openssl", ["pkey", "-in", path.join(dir, "private.pem"), "-pubout"], { encoding: "utf8" });
  expect(publicKeyFromPem(publicPem)).toBe(pubkey);
  expect("key" in decodePublicKey(pubkey)).toBe(true);
});

test("an openssl signature verifies with tweetnacl; a flipped byte does not", () => {
  const asset = path.join(dir, ASSET);
  fs.writeFileSync(asset, binary("signed by openssl"));
  const [signed] = signAssets([asset], pem, pubkey);
  const sig = new Uint8Array(fs.readFileSync(`${asset}.sig`));
  expect(sig.byteLength).toBe(64);
  expect(fs.readFileSync(`${asset}.sha256`, "utf8")).toBe(`${signed?.sha256}  ${ASSET}\n`);
  const key = decodePublicKey(pubkey);
  if (!("key" in key)) throw new Error(key.refusal);
  const bytes = new Uint8Array(fs.readFileSync(asset));
  const sha256File = fs.readFileSync(`${asset}.sha256`, "utf8");
  expect(verifyAsset({ assetName: ASSET, asset: bytes, signature: sig, sha256File, publicKey: key.key })).toBeNull();
  bytes[3] = (bytes[3] ?? 0) ^ 1;
  expect(verifyAsset({ assetName: ASSET, asset: bytes, signature: sig, publicKey: key.key })).toMatch(/does not verify/);
});

test("the whole update path stages an openssl-signed release", async () => {
  const asset = path.join(dir, "release", ASSET);
  fs.mkdirSync(path.dirname(asset));
  const body = binary("v2.0.0 signed by openssl");
  fs.writeFileSync(asset, body);
  signAssets([asset], pem, pubkey);
  const file = (name: string) => new Uint8Array(fs.readFileSync(path.join(path.dirname(asset), name)));
  const gitea = await startFakeGitea();
  const install = fakeInstall();
  try {
    gitea.setLatest({
      tag: "v2.0.0",
      assets: [ASSET, `${ASSET}.sig`, `${ASSET}.sha256`].map((name) => ({ name, serve: { kind: "bytes", body: file(name) } })),
    });
    const outcome = await checkOnce({
      config: { appVer: "stable", updateRepo: gitea.repoUrl, updateAsset: ASSET },
      version: "v1.0.0",
      execPath: install.exe,
      log: captureLog(),
      signal: AbortSignal.timeout(10_000),
      publicKeyBase64: pubkey,
    });
    expect(outcome).toMatchObject({ status: "staged", tag: "v2.0.0" });
    expect(install.read("gpu-turnstile")).toEqual(body);
  } finally {
    install.cleanup();
    await gitea.close();
  }
});

test("signing refuses a key the binaries do not embed, and leaves no key file behind", () => {
  const asset = path.join(dir, "x.bin");
  fs.writeFileSync(asset, "x");
  const tmpKeys = () => fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith("gt-sign-")).length;
  const before = tmpKeys();
  expect(() => signAssets([asset], pem, "")).toThrow(/embeds no key/);
  expect(() => signAssets([asset], pem, Buffer.alloc(32, 9).toString("base64"))).toThrow(/belongs to public key .* but the binaries embed/);
  signAssets([asset], pem, pubkey);
  expect(tmpKeys()).toBe(before);
  expect(fs.existsSync(`${asset}.sig`)).toBe(true);
});

test("the sign CLI refuses while src/update/pubkey.ts embeds no key", () => {
  const asset = path.join(dir, "y.bin");
  fs.writeFileSync(asset, "y");
  const r = spawnSync(process.execPath, [path.join(repoRoot, "scripts/sign.ts"), asset], {
    env: { ...process.env, RELEASE_SIGNING_KEY: pem },
    encoding: "utf8",
  });
  if ((PUBLIC_KEY_BASE64 as string) === "") {
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/embeds no key/);
  } else {
    // a release build with a real key: this throwaway key is not it
    expect(r.stderr).toMatch(/belongs to public key/);
  }
  expect(fs.existsSync(`${asset}.sig`)).toBe(false);
});
