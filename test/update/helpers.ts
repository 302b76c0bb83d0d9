import nacl from "tweetnacl";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { createHash } from "node:crypto";
import type { FakeAsset, FakeRelease } from "./fake-gitea.ts";
import { releaseStatement } from "../../src/update/statement.ts";
import type { UpdateLog } from "../../src/update/types.ts";

export const ASSET = "gpu-turnstile-linux-x64";

export interface TestKey {
  publicKeyBase64: string;
  /** a signature over exactly `bytes` */
  signBytes(bytes: Uint8Array): Uint8Array;
  /** what the release tooling makes: a signature over the release statement */
  signRelease(tag: string, assetName: string, body: Uint8Array): Uint8Array;
}

/** A release key made per test run; the updater gets its public half injected. */
export function testKey(): TestKey {
  const kp = nacl.sign.keyPair();
  const signBytes = (bytes: Uint8Array): Uint8Array => nacl.sign.detached(bytes, kp.secretKey);
  return {
    publicKeyBase64: Buffer.from(kp.publicKey).toString("base64"),
    signBytes,
    signRelease: (tag, assetName, body) => signBytes(new TextEncoder().encode(releaseStatement(tag, assetName, sha256Hex(body)))),
  };
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

export function sha256Line(bytes: Uint8Array, name: string): Uint8Array {
  return new TextEncoder().encode(`${sha256Hex(bytes)}  ${name}\n`);
}

export function binary(text: string): Uint8Array {
  return new TextEncoder().encode(`#!fake-binary ${text}\n`);
}

/** A release whose asset, .sig and .sha256 are all correct for `body`; `patch` breaks one. */
export function signedRelease(
  tag: string,
  body: Uint8Array,
  key: Pick<TestKey, "signRelease">,
  patch: Partial<{ asset: Partial<FakeAsset>; sig: Partial<FakeAsset> | null; sha: Partial<FakeAsset> | null }> = {},
  name = ASSET,
): FakeRelease {
  const assets: FakeAsset[] = [{ name, serve: { kind: "bytes", body }, ...patch.asset }];
  const sig = key.signRelease(tag, name, body);
  if (patch.sig !== null) assets.push({ name: `${name}.sig`, serve: { kind: "bytes", body: sig }, ...patch.sig });
  if (patch.sha !== null) assets.push({ name: `${name}.sha256`, serve: { kind: "bytes", body: sha256Line(body, name) }, ...patch.sha });
  return { tag, assets };
}

export interface FakeInstall {
  dir: string;
  exe: string;
  original: Uint8Array;
  /** the running binary is still the original and nothing was left beside it */
  untouched(): boolean;
  read(file: string): Uint8Array;
  cleanup(): void;
}

/** A temp dir with a fake "running executable". */
export function fakeInstall(): FakeInstall {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-update-"));
  const exe = path.join(dir, "gpu-turnstile");
  const original = binary("the running version");
  fs.writeFileSync(exe, original, { mode: 0o755 });
  return {
    dir,
    exe,
    original,
    untouched: () =>
      Buffer.from(fs.readFileSync(exe)).equals(Buffer.from(original)) && fs.readdirSync(dir).join(",") === "gpu-turnstile",
    read: (file) => new Uint8Array(fs.readFileSync(path.join(dir, file))),
    cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

export interface Captured extends UpdateLog {
  lines: { level: string; msg: string; fields?: Record<string, unknown> }[];
  text(): string;
}

export function captureLog(): Captured {
  const lines: Captured["lines"] = [];
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push({ level, msg, fields });
  return {
    lines,
    debug: at("debug"),
    info: at("info"),
    warn: at("warn"),
    error: at("error"),
    text: () => lines.map((l) => `${l.level} ${l.msg} ${l.fields ? JSON.stringify(l.fields) : ""}`).join("\n"),
  };
}
