/** The background loop: when it looks, what it logs, and that the exit-3 restart waits for an idle GPU. */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import type { Lease } from "../../src/lock/index.ts";
import { realStageFs } from "../../src/update/stage.ts";
import { startUpdater } from "../../src/update/updater.ts";
import type { UpdaterOptions } from "../../src/update/updater.ts";
import { startFakeGitea } from "./fake-gitea.ts";
import type { FakeGitea } from "./fake-gitea.ts";
import { ASSET, binary, captureLog, fakeInstall, signedRelease, testKey } from "./helpers.ts";
import type { Captured, FakeInstall } from "./helpers.ts";

const key = testKey();
const NEW = binary("v1.3.0");
let gitea: FakeGitea;
let install: FakeInstall;
let log: Captured;

beforeAll(async () => {
  gitea = await startFakeGitea();
});
afterAll(() => gitea.close());
beforeEach(() => {
  install = fakeInstall();
  log = captureLog();
  gitea.requests.length = 0;
  gitea.setLatest(null);
});
afterEach(() => install.cleanup());

function options(over: Partial<UpdaterOptions> & { appVer?: string; autoUpdate?: boolean } = {}): UpdaterOptions {
  const { appVer, autoUpdate, ...rest } = over;
  return {
    config: { autoUpdate: autoUpdate ?? true, updateIntervalMs: 60_000, appVer: appVer ?? "stable", updateRepo: gitea.repoUrl, updateAsset: ASSET },
    version: "v1.2.0",
    execPath: install.exe,
    isService: false,
    waitIdle: () => Promise.resolve(),
    beginShutdown: () => {
      throw new Error("beginShutdown must not be called");
    },
    log,
    publicKeyBase64: key.publicKeyBase64,
    ...rest,
  };
}

/** Lets every pending callback run, so "has not happened" is a fair statement. */
async function turns(n = 5): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

/** Resolves when `pred` holds; fails the test after `ms`. */
async function until(pred: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${log.text()}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("startUpdater", () => {
  test("interactive: stages the newer release and says restart to apply", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    await startUpdater(options()).done;
    expect(log.lines).toContainEqual(expect.objectContaining({ level: "warn", msg: "update v1.3.0 staged; restart to apply" }));
    expect(install.read("gpu-turnstile")).toEqual(NEW);
  });

  test("checks again every UPDATE_INTERVAL after a refusal, logging why", async () => {
    const sig = key.signRelease("v1.3.0", ASSET, NEW);
    sig[0] = (sig[0] ?? 0) ^ 1;
    gitea.setLatest(signedRelease("v1.3.0", NEW, key, { sig: { serve: { kind: "bytes", body: sig } } }));
    const updater = startUpdater(options({ config: { autoUpdate: true, updateIntervalMs: 20, appVer: "stable", updateRepo: gitea.repoUrl, updateAsset: ASSET } }));
    await until(() => log.lines.some((l) => l.msg.startsWith("update refused:")), "the refusal line");
    const refusal = log.lines.find((l) => l.msg.startsWith("update refused:"));
    expect(refusal?.level).toBe("warn");
    expect(refusal?.msg).toMatch(/signature of gpu-turnstile-linux-x64 does not verify against the embedded release key/);
    expect(install.untouched()).toBe(true);
    gitea.setLatest(signedRelease("v1.3.0", NEW, key)); // the release is fixed
    await updater.done;
    expect(install.read("gpu-turnstile")).toEqual(NEW);
    expect(gitea.requests.filter((p) => p.endsWith("/releases/latest")).length).toBeGreaterThanOrEqual(2);
  });

  test("a full disk while staging: one error line, the binary untouched, applied at the next interval", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    let full = true;
    /** the install as each attempt found it when it began to write */
    const before: boolean[] = [];
    const updater = startUpdater(
      options({
        config: { autoUpdate: true, updateIntervalMs: 20, appVer: "stable", updateRepo: gitea.repoUrl, updateAsset: ASSET },
        stageFs: {
          ...realStageFs,
          openSync: (file, flags, mode) => {
            if (flags === "wx") before.push(install.untouched());
            return realStageFs.openSync(file, flags, mode);
          },
          writeSync: (fd, data, offset, length) => {
            if (!full) return realStageFs.writeSync(fd, data, offset, length);
            full = false; // the operator frees space before the next check
            throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
          },
        },
      }),
    );
    await updater.done;
    expect(before).toEqual([true, true]);
    const errors = log.lines.filter((l) => l.level === "error");
    expect(errors).toEqual([
      {
        level: "error",
        msg: "update not applied: staging failed, the running binary is unchanged: writing gpu-turnstile.new: ENOSPC: no space left on device, write",
        fields: { next_check_ms: 20 },
      },
    ]);
    expect(install.read("gpu-turnstile")).toEqual(NEW);
  });

  test("APP_VER=dev: never calls the API", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    await startUpdater(options({ appVer: "dev" })).done;
    expect(gitea.requests).toEqual([]);
    expect(log.lines).toContainEqual(expect.objectContaining({ msg: "APP_VER=dev: updates are off" }));
  });

  test("no embedded key: warns once at startup and never asks", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    await startUpdater(options({ publicKeyBase64: "" })).done;
    expect(gitea.requests).toEqual([]);
    expect(log.lines).toEqual([{ level: "warn", msg: "updates disabled: this build has no embedded release key", fields: undefined }]);
    expect(install.untouched()).toBe(true);
  });

  test("AUTO_UPDATE=false: never asks", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    await startUpdater(options({ autoUpdate: false })).done;
    expect(gitea.requests).toEqual([]);
  });

  test("stop() ends the wait for the next check", async () => {
    gitea.setLatest(signedRelease("v1.2.0", NEW, key));
    const updater = startUpdater(options());
    await until(() => gitea.requests.length === 1, "the first check");
    updater.stop();
    await updater.done;
    expect(gitea.requests.length).toBe(1);
  });
});

describe("as a service, the exit-3 restart waits for the GPU to be idle", () => {
  /** waitIdle as the wiring does it: take the GPU exclusively (waits for every lease to end). */
  function serviceWith(lock: GpuLock) {
    let waiting = false;
    let exitCode: number | undefined;
    let idleLease: Lease | undefined;
    const updater = startUpdater(
      options({
        isService: true,
        waitIdle: async () => {
          waiting = true;
          idleLease = await lock.acquireImage();
        },
        beginShutdown: (code) => {
          exitCode = code;
          idleLease?.release();
        },
      }),
    );
    return { updater, waiting: () => waiting, exitCode: () => exitCode };
  }

  test("an image job in flight", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    const lock = new GpuLock();
    const job = await lock.acquireImage();
    const svc = serviceWith(lock);
    await until(svc.waiting, "waitIdle");
    await turns();
    expect(svc.exitCode()).toBeUndefined();
    expect(install.read("gpu-turnstile")).toEqual(NEW); // staged already; only the restart waits
    job.release();
    await svc.updater.done;
    expect(svc.exitCode()).toBe(3);
    expect(log.lines.map((l) => l.msg)).toContain("restarting to apply update v1.3.0 (exit 3)");
  });

  test("a streaming chat (and a second LLM request) in flight", async () => {
    gitea.setLatest(signedRelease("v1.3.0", NEW, key));
    const lock = new GpuLock();
    const chat = await lock.acquireLLM();
    const other = await lock.acquireLLM();
    const svc = serviceWith(lock);
    await until(svc.waiting, "waitIdle");
    other.release();
    await turns();
    expect(svc.exitCode()).toBeUndefined();
    chat.release();
    await svc.updater.done;
    expect(svc.exitCode()).toBe(3);
  });
});
