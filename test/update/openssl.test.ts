/**
 * The release tooling and the updater agree: `openssl pkeyutl -sign -rawin` (scripts/sign.ts)
 * signs the release statement, tweetnacl in the updater verifies it for that tag and asset name
 * only, and openssl verifies it by hand the way docs/RELEASING.md shows.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import nacl from "tweetnacl";
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

const sign = (assets: string[], tag: string, expectPublicKey = pubkey) => signAssets({ assets, tag, pem, expectPublicKey });

test("an openssl signature verifies in the updater for its tag and asset name, and for nothing else", () => {
  const asset = path.join(dir, ASSET);
  fs.writeFileSync(asset, binary("signed by openssl"));
  const [signed] = sign([asset], "v1.2.3");
  const sig = new Uint8Array(fs.readFileSync(`${asset}.sig`));
  expect(sig.byteLength).toBe(64);
  expect(fs.readFileSync(`${asset}.sha256`, "utf8")).toBe(`${signed?.sha256}  ${ASSET}\n`);
  const key = decodePublicKey(pubkey);
  if (!("key" in key)) throw new Error(key.refusal);
  const bytes = new Uint8Array(fs.readFileSync(asset));
  const sha256File = fs.readFileSync(`${asset}.sha256`, "utf8");
  const verify = (tag: string, assetName: string, b = bytes) => verifyAsset({ tag, assetName, asset: b, signature: sig, publicKey: key.key });
  expect(verifyAsset({ tag: "v1.2.3", assetName: ASSET, asset: bytes, signature: sig, sha256File, publicKey: key.key })).toEqual({ sha256: signed?.sha256 ?? "" });
  expect(verify("v1.2.4", ASSET)).toMatchObject({ refusal: expect.stringMatching(/does not verify/) });
  expect(verify("v1.2.3", "gpu-turnstile.exe")).toMatchObject({ refusal: expect.stringMatching(/does not verify/) });
  // not a signature over the bytes themselves (the old format)
  expect(nacl.sign.detached.verify(bytes, sig, key.key)).toBe(false);
  bytes[3] = (bytes[3] ?? 0) ^ 1;
  expect(verify("v1.2.3", ASSET)).toMatchObject({ refusal: expect.stringMatching(/does not verify/) });
});

test("docs/RELEASING.md's check by hand (sha256sum, printf, openssl pkeyutl -verify) accepts the tag signed and no other", () => {
  const docs = fs.readFileSync(path.join(repoRoot, "docs/RELEASING.md"), "utf8");
  const script = /Verifying a download by hand[\s\S]*?```sh\n([\s\S]*?)```/.exec(docs)?.[1];
  expect(script).toContain("openssl pkeyutl -verify");
  const work = path.join(dir, "by-hand");
  fs.mkdirSync(work);
  execFileSync("openssl", ["pkey", "-in", path.join(dir, "private.pem"), "-pubout", "-out", path.join(work, "public.pem")]);
  const exe = path.join(work, "gpu-turnstile.exe");
  fs.writeFileSync(exe, binary("windows build"));
  const run = () => spawnSync("bash", ["-euo", "pipefail", "-c", script ?? ""], { cwd: work, encoding: "utf8" });
  sign([exe], "v1.2.3"); // the tag the docs' example uses
  const ok = run();
  expect(ok.stdout + ok.stderr).toMatch(/Signature Verified Successfully/);
  expect(ok.status).toBe(0);
  sign([exe], "v1.2.4");
  expect(run().status).not.toBe(0);
});

test("the whole update path stages an openssl-signed release, and refuses the same files under another tag", async () => {
  const asset = path.join(dir, "release", ASSET);
  fs.mkdirSync(path.dirname(asset));
  const body = binary("v2.0.0 signed by openssl");
  fs.writeFileSync(asset, body);
  sign([asset], "v2.0.0");
  const file = (name: string) => new Uint8Array(fs.readFileSync(path.join(path.dirname(asset), name)));
  const gitea = await startFakeGitea();
  const install = fakeInstall();
  try {
    const publish = (tag: string) =>
      gitea.setLatest({ tag, assets: [ASSET, `${ASSET}.sig`, `${ASSET}.sha256`].map((name) => ({ name, serve: { kind: "bytes", body: file(name) } })) });
    const check = () =>
      checkOnce({
        config: { appVer: "stable", updateRepo: gitea.repoUrl, updateAsset: ASSET },
        version: "v1.0.0",
        execPath: install.exe,
        log: captureLog(),
        signal: AbortSignal.timeout(10_000),
        publicKeyBase64: pubkey,
      });
    publish("v2.0.1");
    expect(await check()).toMatchObject({ status: "failed", reason: expect.stringMatching(/^v2\.0\.1: signature of .* does not verify/) });
    expect(install.untouched()).toBe(true);
    publish("v2.0.0");
    expect(await check()).toMatchObject({ status: "staged", tag: "v2.0.0" });
    expect(install.read("gpu-turnstile")).toEqual(body);
  } finally {
    install.cleanup();
    await gitea.close();
  }
});

test("signing refuses a key the binaries do not embed or a tag that is not vX.Y.Z, and leaves no key file behind", () => {
  const asset = path.join(dir, "x.bin");
  fs.writeFileSync(asset, "x");
  const tmpKeys = () => fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith("gt-sign-")).length;
  const before = tmpKeys();
  expect(() => sign([asset], "v1.0.0", "")).toThrow(/embeds no key/);
  expect(() => sign([asset], "v1.0.0", Buffer.alloc(32, 9).toString("base64"))).toThrow(/belongs to public key .* but the binaries embed/);
  expect(() => sign([asset], "v0.0.0-dev+abc1234")).toThrow(/tag "v0\.0\.0-dev\+abc1234" is not vX\.Y\.Z/);
  expect(fs.existsSync(`${asset}.sig`)).toBe(false);
  sign([asset], "v1.0.0");
  expect(tmpKeys()).toBe(before);
  expect(fs.existsSync(`${asset}.sig`)).toBe(true);
});

test("the sign CLI wants --tag, and refuses while src/update/pubkey.ts embeds no key", () => {
  const asset = path.join(dir, "y.bin");
  fs.writeFileSync(asset, "y");
  const cli = (...args: string[]) =>
    spawnSync(process.execPath, [path.join(repoRoot, "scripts/sign.ts"), ...args], {
      env: { ...process.env, RELEASE_SIGNING_KEY: pem },
      encoding: "utf8",
    });
  const untagged = cli(asset);
  expect(untagged.status).toBe(2);
  expect(untagged.stderr).toContain("--tag vX.Y.Z");
  const r = cli("--tag", "v1.0.0", asset);
  if ((PUBLIC_KEY_BASE64 as string) === "") {
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/embeds no key/);
  } else {
    // a release build with a real key: this throwaway key is not it
    expect(r.stderr).toMatch(/belongs to public key/);
  }
  expect(fs.existsSync(`${asset}.sig`)).toBe(false);
});
