/** One update attempt against a fake Gitea over real HTTP: what is staged, and what is refused and why. */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { checkOnce } from "../../src/update/check.ts";
import type { CheckContext, CheckOutcome } from "../../src/update/check.ts";
import { startFakeGitea } from "./fake-gitea.ts";
import type { FakeGitea } from "./fake-gitea.ts";
import { ASSET, binary, captureLog, fakeInstall, sha256Line, signedRelease, testKey } from "./helpers.ts";
import type { FakeInstall } from "./helpers.ts";

const key = testKey();
const NEW = binary("v1.3.0");
let gitea: FakeGitea;
let install: FakeInstall;

beforeAll(async () => {
  gitea = await startFakeGitea();
});
afterAll(() => gitea.close());
beforeEach(() => {
  install = fakeInstall();
  gitea.requests.length = 0;
  gitea.setLatest(null);
});
afterEach(() => install.cleanup());

function check(over: Partial<CheckContext> & { appVer?: string; asset?: string } = {}): Promise<CheckOutcome> {
  const { appVer, asset, ...rest } = over;
  return checkOnce({
    config: { appVer: appVer ?? "stable", updateRepo: gitea.repoUrl, updateAsset: asset ?? ASSET },
    version: "v1.2.0",
    execPath: install.exe,
    log: captureLog(),
    signal: AbortSignal.timeout(10_000),
    publicKeyBase64: key.publicKeyBase64,
    ...rest,
  });
}

const downloads = (): string[] => gitea.requests.filter((p) => p.includes("/releases/download/"));

function expectRefused(outcome: CheckOutcome, why: RegExp): void {
  expect(outcome.status).toBe("failed");
  if (outcome.status === "failed") expect(outcome.reason).toMatch(why);
  expect(install.untouched()).toBe(true);
}

describe("a newer stable release", () => {
  test("is downloaded, verified and staged; the old binary is kept as .old", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    const outcome = await check();
    expect(outcome).toMatchObject({ status: "staged", tag: "v1.3.0" });
    expect(install.read("gpu-turnstile")).toEqual(NEW);
    expect(install.read("gpu-turnstile.old")).toEqual(install.original);
    expect(fs.existsSync(`${install.exe}.new`)).toBe(false);
    expect(fs.statSync(install.exe).mode & 0o111).not.toBe(0);
    expect(gitea.requests[0]).toBe("/api/v1/repos/PUBLIC/gpu-turnstile/releases/latest");
  });

  test("without a .sha256 the signature alone suffices", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { sha: null }));
    expect((await check()).status).toBe("staged");
  });

  test("replaces a dev build, which cannot be compared", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    expect(await check({ version: "v0.0.0-dev+abc1234" })).toMatchObject({ status: "staged", tag: "v1.3.0" });
  });

  test("a redirect on the same host is followed", async () => {
    const rel = signedRelease("v1.3.0", NEW, key);
    const real = { name: "copy", serve: { kind: "bytes" as const, body: NEW } };
    rel.assets.push(real);
    rel.assets[0] = { name: ASSET, size: NEW.byteLength, serve: { kind: "redirect", location: "/PUBLIC/gpu-turnstile/releases/download/v1.3.0/copy" } };
    gitea.setLatest(rel);
    expect((await check()).status).toBe("staged");
    expect(install.read("gpu-turnstile")).toEqual(NEW);
  });
});

describe("a signature binds the tag and the asset name, not just the bytes", () => {
  const OLD = binary("v1.1.0, signed long ago");
  /** A release `tag` carrying `body` with the given .sig (and a .sha256 that matches the body). */
  const release = (tag: string, body: Uint8Array, sig: Uint8Array) => signedRelease(tag, body, key, { sig: { serve: { kind: "bytes", body: sig } } });

  test("a release signed for its tag and asset name is accepted", async () => {
    gitea.setLatest(release("v1.3.0", NEW, key.signRelease("v1.3.0", ASSET, NEW)));
    expect(await check()).toMatchObject({ status: "staged", tag: "v1.3.0" });
    expect(install.read("gpu-turnstile")).toEqual(NEW);
  });

  test("an old signed binary re-tagged as a newer release is refused", async () => {
    gitea.setLatest(release("v9.9.9", OLD, key.signRelease("v1.1.0", ASSET, OLD)));
    expectRefused(await check(), /^v9\.9\.9: signature of gpu-turnstile-linux-x64 does not verify against the embedded release key \(checked for tag v9\.9\.9, asset gpu-turnstile-linux-x64, SHA-256 [0-9a-f]{64}\)$/);
  });

  test("an old signed binary re-tagged as the pinned APP_VER is refused", async () => {
    gitea.addRelease(release("v1.5.0", OLD, key.signRelease("v1.1.0", ASSET, OLD)));
    expectRefused(await check({ appVer: "v1.5.0" }), /^v1\.5\.0: signature of gpu-turnstile-linux-x64 does not verify .*tag v1\.5\.0/);
  });

  test("a signature made for another asset name is refused", async () => {
    gitea.setLatest(release("v1.3.0", NEW, key.signRelease("v1.3.0", "gpu-turnstile.exe", NEW)));
    expectRefused(await check(), /does not verify .*asset gpu-turnstile-linux-x64,/);
  });

  test("a signature over the raw bytes only is refused", async () => {
    gitea.setLatest(release("v1.3.0", NEW, key.signBytes(NEW)));
    expectRefused(await check(), /signature of gpu-turnstile-linux-x64 does not verify/);
  });
});

describe("refused, with the reason, leaving the running binary alone", () => {
  test("tampered asset (signature no longer matches)", async () => {
    const tampered = binary("v1.3.0 with a backdoor");
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { asset: { serve: { kind: "bytes", body: tampered } }, sha: null }));
    expectRefused(await check(), /signature of gpu-turnstile-linux-x64 does not verify/);
  });

  test("tampered asset with a matching .sha256 (an attacker can recompute a digest)", async () => {
    const tampered = binary("v1.3.0 with a backdoor");
    gitea.setLatest(
      signedRelease("v1.3.0", NEW, key, {
        asset: { serve: { kind: "bytes", body: tampered } },
        sha: { serve: { kind: "bytes", body: sha256Line(tampered, ASSET) } },
      }),
    );
    expectRefused(await check(), /does not verify against the embedded release key/);
  });

  test("tampered signature", async () => {
    const sig = key.signRelease("v1.3.0", ASSET, NEW);
    sig[10] = (sig[10] ?? 0) ^ 0xff;
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { sig: { serve: { kind: "bytes", body: sig } } }));
    expectRefused(await check(), /does not verify/);
  });

  test("signature made by another key", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, testKey()));
    expectRefused(await check(), /does not verify/);
  });

  test("missing signature: nothing is downloaded", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { sig: null }));
    expectRefused(await check(), /has no signature gpu-turnstile-linux-x64\.sig/);
    expect(downloads()).toEqual([]);
  });

  test("signature of the wrong length", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { sig: { serve: { kind: "bytes", body: new Uint8Array(63) } } }));
    expectRefused(await check(), /\.sig: .*(63|64)/);
  });

  test("SHA-256 mismatch", async () => {
    gitea.setLatest(
      signedRelease("v1.3.0", NEW, key, { sha: { serve: { kind: "bytes", body: sha256Line(binary("other"), ASSET) } } }),
    );
    expectRefused(await check(), /SHA-256 mismatch for gpu-turnstile-linux-x64/);
  });

  test("truncated download (connection closed before Content-Length bytes)", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { asset: { serve: { kind: "truncate", body: NEW, sendBytes: 10 } } }));
    expectRefused(await check(), /truncated|broke off/);
  });

  test("oversize per the release metadata: refused before downloading", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    expectRefused(await check({ limits: { assetBytes: 16 } }), /too large .*limit 16/);
    expect(downloads().some((p) => p.endsWith(ASSET))).toBe(false);
  });

  test("oversize stream that the metadata understated: cut off at the limit", async () => {
    const big = new Uint8Array(64 * 1024).fill(7);
    gitea.setLatest(signedRelease("v1.3.0", big, key, { asset: { size: 100, serve: { kind: "chunked", body: big } } }));
    expectRefused(await check({ limits: { assetBytes: 4096 } }), /too large \(more than 4096 bytes\)/);
  });

  test("a body longer than the release's advertised size", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { asset: { size: 5 } }));
    expectRefused(await check(), /Content-Length \d+ differs from the expected 5 bytes/);
  });

  test("asset name with path separators: not even the API is asked", async () => {
    const evil = "../gpu-turnstile";
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, {}, evil));
    expectRefused(await check({ asset: evil }), /asset name "\.\.\/gpu-turnstile" is not a plain file name/);
    expectRefused(await check({ asset: "..\\gpu-turnstile" }), /not a plain file name/);
    expect(gitea.requests).toEqual([]);
  });

  test("redirect to another host", async () => {
    const other = http.createServer((_req, res) => res.end(NEW));
    await new Promise<void>((r) => other.listen(0, "127.0.0.1", r));
    try {
      const elsewhere = `http://127.0.0.1:${(other.address() as AddressInfo).port}/bucket/${ASSET}`;
      gitea.setLatest(signedRelease("v1.3.0", NEW, key, { asset: { size: NEW.byteLength, serve: { kind: "redirect", location: elsewhere } } }));
      expectRefused(await check(), /redirect refusing 127\.0\.0\.1:\d+: not the update host 127\.0\.0\.1:\d+/);
    } finally {
      other.close();
    }
  });

  test("asset URL on another host in the release JSON itself", async () => {
    const fetchRewriting = (input: string | URL, init?: RequestInit): Promise<Response> =>
      fetch(input, init).then(async (res) => {
        if (!String(input).endsWith("/releases/latest")) return res;
        const text = (await res.text()).replaceAll("127.0.0.1", "localhost");
        return new Response(text, { status: res.status, headers: { "content-type": "application/json" } });
      });
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    expectRefused(await check({ fetch: fetchRewriting }), /refusing localhost:\d+: not the update host/);
  });

  test("a draft or a non-version tag", async () => {
    gitea.setLatest({ ...signedRelease("v1.3.0", NEW, key), draft: true });
    expectRefused(await check(), /release v1\.3\.0 is a draft/);
    gitea.setLatest(signedRelease("nightly", NEW, key));
    expectRefused(await check(), /latest release tag "nightly" is not vX\.Y\.Z/);
  });

  test("the release has no asset for this platform", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, {}, "gpu-turnstile.exe"));
    expectRefused(await check(), /release v1\.3\.0 has no asset gpu-turnstile-linux-x64/);
  });

  test("no release published at all", async () => {
    expectRefused(await check(), /PUBLIC\/gpu-turnstile has no published release/);
  });

  test("plain http to a non-loopback host", async () => {
    expectRefused(await check({ config: { appVer: "stable", updateRepo: "http://example.invalid/o/r", updateAsset: ASSET } }), /only https is allowed/);
  });

  test("a server that never answers: the attempt's timeout", async () => {
    const silent = http.createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    try {
      const repo = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/o/r`;
      const outcome = await check({ config: { appVer: "stable", updateRepo: repo, updateAsset: ASSET }, signal: AbortSignal.timeout(200) });
      expectRefused(outcome, /latest release: timed out/);
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });
});

describe("nothing to do", () => {
  test("equal and older releases are skipped without downloading", async () => {
    gitea.setLatest(signedRelease("v1.2.0", NEW, key));
    expect(await check()).toMatchObject({ status: "current", reason: expect.stringMatching(/up to date/) });
    gitea.setLatest(signedRelease("v1.1.9", NEW, key));
    expect(await check()).toMatchObject({ status: "current", reason: expect.stringMatching(/newer than the latest release v1\.1\.9/) });
    gitea.setLatest({ ...signedRelease("v9.0.0", NEW, key), prerelease: true });
    expect(await check()).toMatchObject({ status: "current", reason: expect.stringMatching(/pre-release/) });
    expect(downloads()).toEqual([]);
    expect(install.untouched()).toBe(true);
  });

  test("APP_VER=dev never calls the API", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    expect(await check({ appVer: "dev" })).toMatchObject({ status: "disabled", reason: "APP_VER=dev: updates are off" });
    expect(gitea.requests).toEqual([]);
  });

  test("no embedded key: never updates, never asks", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    const outcome = await check({ publicKeyBase64: "" });
    expect(outcome).toEqual({ status: "disabled", reason: "updates disabled: this build has no embedded release key" });
    expect(gitea.requests).toEqual([]);
    expect(install.untouched()).toBe(true);
  });

  test("running from source (unstamped): never replaces the bun runtime", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    expect(await check({ version: "dev" })).toMatchObject({ status: "disabled" });
    expect(gitea.requests).toEqual([]);
  });
});

describe("APP_VER pinned to a tag", () => {
  test("stages a downgrade from the tag endpoint", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    const old = binary("v1.1.0");
    gitea.addRelease(signedRelease("v1.1.0", old, key));
    const outcome = await check({ appVer: "v1.1.0" });
    expect(outcome).toMatchObject({ status: "staged", tag: "v1.1.0", reason: expect.stringMatching(/downgrade/) });
    expect(gitea.requests[0]).toBe("/api/v1/repos/PUBLIC/gpu-turnstile/releases/tags/v1.1.0");
    expect(install.read("gpu-turnstile")).toEqual(old);
  });

  test("already on the pinned tag: no request at all", async () => {
    expect(await check({ appVer: "v1.2.0" })).toMatchObject({ status: "current" });
    expect(gitea.requests).toEqual([]);
  });

  test("a missing tag is an error naming it", async () => {
    expectRefused(await check({ appVer: "v7.7.7" }), /there is no release v7\.7\.7/);
  });
});
