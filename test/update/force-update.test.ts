/** --force-update: one attempt, an exit code and a message, a service restart when staged. */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { forceUpdate } from "../../src/update/force-update.ts";
import type { ForceUpdateOptions } from "../../src/update/force-update.ts";
import { realStageFs } from "../../src/update/stage.ts";
import { startFakeGitea } from "./fake-gitea.ts";
import type { FakeGitea } from "./fake-gitea.ts";
import { ASSET, binary, captureLog, fakeInstall, sha256Hex, signedRelease, testKey } from "./helpers.ts";
import type { FakeInstall } from "./helpers.ts";

const key = testKey();
const NEW = binary("v1.3.0");
let gitea: FakeGitea;
let install: FakeInstall;
let restarts = 0;

beforeAll(async () => {
  gitea = await startFakeGitea();
});
afterAll(() => gitea.close());
beforeEach(() => {
  install = fakeInstall();
  restarts = 0;
  gitea.requests.length = 0;
  gitea.setLatest(signedRelease("v1.3.0", NEW, key));
});
afterEach(() => install.cleanup());

function run(over: Partial<ForceUpdateOptions> & { appVer?: string; updateRepo?: string } = {}) {
  const { appVer, updateRepo, ...rest } = over;
  return forceUpdate({
    config: { appVer: appVer ?? "stable", updateRepo: updateRepo ?? gitea.repoUrl, updateAsset: ASSET },
    version: "v1.2.0",
    execPath: install.exe,
    log: captureLog(),
    publicKeyBase64: key.publicKeyBase64,
    restartService: async () => {
      restarts++;
      return "restarted";
    },
    ...rest,
  });
}

test("newer release with the service running: staged, service restarted, exit 0", async () => {
  const r = await run();
  expect(r).toEqual({ exitCode: 0, message: "update v1.3.0 staged (v1.3.0 is newer than v1.2.0); restarting service" });
  expect(restarts).toBe(1);
  expect(install.read("gpu-turnstile")).toEqual(NEW);
});

test("no service running: applies on next start", async () => {
  const r = await run({ restartService: async () => "not-running" });
  expect(r.exitCode).toBe(0);
  expect(r.message).toMatch(/applies on next start$/);
});

test("up to date: exit 0, nothing restarted", async () => {
  const r = await run({ version: "v1.3.0" });
  expect(r).toEqual({ exitCode: 0, message: "up to date: v1.3.0 is the latest release" });
  expect(restarts).toBe(0);
});

test("a refused update: exit 1 with the reason, binary untouched, no restart", async () => {
  gitea.setLatest(signedRelease("v1.3.0", NEW, testKey()));
  const r = await run();
  expect(r.exitCode).toBe(1);
  expect(r.message).toMatch(/^update failed: v1\.3\.0: signature of gpu-turnstile-linux-x64 does not verify/);
  expect(install.untouched()).toBe(true);
  expect(restarts).toBe(0);
});

describe("each refusal is one line naming what was checked; the binary is untouched", () => {
  const OLD = binary("v1.1.0, signed long ago");
  const withSig = (tag: string, body: Uint8Array, sig: Uint8Array) => signedRelease(tag, body, key, { sig: { serve: { kind: "bytes", body: sig } } });
  const cases: [what: string, release: () => ReturnType<typeof signedRelease>, message: string][] = [
    [
      "an old signed binary re-tagged",
      () => withSig("v9.9.9", OLD, key.signRelease("v1.1.0", ASSET, OLD)),
      `update failed: v9.9.9: signature of ${ASSET} does not verify against the embedded release key (checked for tag v9.9.9, asset ${ASSET}, SHA-256 ${sha256Hex(OLD)})`,
    ],
    [
      "a signature for another asset name",
      () => withSig("v1.3.0", NEW, key.signRelease("v1.3.0", "gpu-turnstile.exe", NEW)),
      `update failed: v1.3.0: signature of ${ASSET} does not verify against the embedded release key (checked for tag v1.3.0, asset ${ASSET}, SHA-256 ${sha256Hex(NEW)})`,
    ],
    [
      "a signature over the raw bytes only",
      () => withSig("v1.3.0", NEW, key.signBytes(NEW)),
      `update failed: v1.3.0: signature of ${ASSET} does not verify against the embedded release key (checked for tag v1.3.0, asset ${ASSET}, SHA-256 ${sha256Hex(NEW)})`,
    ],
  ];
  test.each(cases)("%s", async (_what, release, message) => {
    gitea.setLatest(release());
    expect(await run()).toEqual({ exitCode: 1, message });
    expect(install.untouched()).toBe(true);
    expect(restarts).toBe(0);
  });

  test("a full disk while staging", async () => {
    const stageFs = {
      ...realStageFs,
      writeSync: () => {
        throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
      },
    };
    expect(await run({ stageFs })).toEqual({
      exitCode: 1,
      message: "update failed: staging failed, the running binary is unchanged: writing gpu-turnstile.new: ENOSPC: no space left on device, write",
    });
    expect(install.untouched()).toBe(true);
    expect(restarts).toBe(0);
  });
});

test("restart failure after staging: exit 1, says the update is staged", async () => {
  const r = await run({
    restartService: async () => {
      throw new Error("systemctl: access denied");
    },
  });
  expect(r).toEqual({ exitCode: 1, message: "update v1.3.0 staged, but restarting the service failed: systemctl: access denied" });
});

test("one attempt with a timeout: a hanging server is an error, not a wait", async () => {
  const silent = http.createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  try {
    const r = await run({ updateRepo: `http://127.0.0.1:${(silent.address() as AddressInfo).port}/o/r`, timeoutMs: 200 });
    expect(r).toEqual({ exitCode: 1, message: "update failed: latest release: timed out" });
  } finally {
    silent.closeAllConnections();
    silent.close();
  }
});

test("APP_VER=dev or no key: exit 1 without asking the server", async () => {
  expect(await run({ appVer: "dev" })).toEqual({ exitCode: 1, message: "not updating: APP_VER=dev: updates are off" });
  expect((await run({ publicKeyBase64: "" })).message).toBe("not updating: updates disabled: this build has no embedded release key");
  expect(gitea.requests).toEqual([]);
});

test("staging without the rights: relaunches elevated and mirrors its exit code", async () => {
  const denied = Object.assign(new Error("EPERM: operation not permitted, rename"), { code: "EPERM" });
  let elevated = 0;
  const r = await run({
    stageFs: {
      ...realStageFs,
      renameSync: () => {
        throw denied;
      },
    },
    elevate: async () => {
      elevated++;
      return 0;
    },
  });
  expect(elevated).toBe(1);
  expect(r.exitCode).toBe(0);
  expect(install.untouched()).toBe(true);
});
