/**
 * Issue 28, point 4: after install-service, `status`, `lease` and `release` run from the installed
 * binary read the config the service reads (/etc/gpu-turnstile.env, recorded in the unit's
 * EnvironmentFile=), not a gpu-turnstile.env beside the binary that nothing wrote, and say which
 * file they read. The install is the real installLinux against a temporary root with a fake
 * systemctl (as in test/service/linux-install.test.ts); only the root prefix is mapped.
 */
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findInstance } from "../../src/cli/status.ts";
import { updateTarget } from "../../src/cli/update.ts";
import { installLinux, LINUX_LAYOUT } from "../../src/service/linux-install.ts";
import { nodePlatform } from "../../src/service/platform-node.ts";
import { formatLines } from "../../src/service/report.ts";
import { fromScQc, readInstalledService, splitWindowsCommandLine, type InstalledService } from "../../src/service/service-config.ts";
import { serviceBinPath, quoteWindowsArg } from "../../src/service/windows-sc.ts";
import { WINDOWS_SERVICE_FLAG } from "../../src/service/windows-install.ts";
import { standInConfig } from "../service/stand-ins.ts";

let dir: string;
let root: string;
const host = (p: string) => join(root, p);

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "gt-client-config-"));
  root = join(dir, "root");
  mkdirSync(join(root, "run/systemd/system"), { recursive: true });
  mkdirSync(join(dir, "state"));
  mkdirSync(join(dir, "bin"));
  mkdirSync(join(dir, "dl"));
  copyFileSync(join(import.meta.dir, "..", "service", "fixtures", "systemctl"), join(dir, "bin", "systemctl"));
  chmodSync(join(dir, "bin", "systemctl"), 0o755);
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `f` with stderr captured. */
function stderrOf<T>(f: () => T): { value: T; err: string } {
  const err: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((s: string) => (err.push(s), true)) as typeof process.stderr.write;
  try {
    return { value: f(), err: err.join("") };
  } finally {
    process.stderr.write = write;
  }
}

/** install-service from a download folder whose gpu-turnstile.env sets a port and a token; the installed service as the CLI sees it. */
async function installed(): Promise<() => InstalledService | null> {
  const self = join(dir, "dl", "gpu-turnstile");
  writeFileSync(self, "#!binary\n", { mode: 0o755 });
  writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\nLISTEN_OLLAMA=127.0.0.1:11999\nADMIN_TOKEN=the-service-token\n");
  const p = nodePlatform({ root, env: { PATH: `${join(dir, "bin")}:${process.env.PATH}`, FAKE_SYSTEMCTL_STATE: join(dir, "state") } });
  const out = await installLinux(p, { selfPath: self, noCopy: false, version: "v1.2.0", config: standInConfig });
  expect(out.exitCode, formatLines(out.lines)).toBe(0);
  // The download folder is gone (the user deleted it): only what install-service wrote remains.
  rmSync(join(dir, "dl"), { recursive: true });
  return () => {
    const s = readInstalledService("linux", host(LINUX_LAYOUT.unitPath));
    return s && { ...s, config: host(s.config) };
  };
}

describe("the client commands find the installed service's config", () => {
  test("from the installed binary: the unit's EnvironmentFile (its port and token), and it says so", async () => {
    const installedService = await installed();
    expect(installedService()?.exe).toBe(LINUX_LAYOUT.binPath);
    const { value, err } = stderrOf(() => findInstance({ env: {}, execPath: LINUX_LAYOUT.binPath, installedService }));
    expect(value).toEqual({ base: "http://127.0.0.1:11999", headers: { authorization: "Bearer the-service-token" } });
    expect(err).toBe(`gpu-turnstile: config: ${host(LINUX_LAYOUT.configPath)} (the installed service's config: EnvironmentFile= in ${host(LINUX_LAYOUT.unitPath)})\n`);
  });

  test("another copy of the binary uses the config beside it; with none beside it, the installed service's", async () => {
    const installedService = await installed();
    const other = join(dir, "other", "gpu-turnstile");
    mkdirSync(join(dir, "other"));
    const asOther = () => stderrOf(() => findInstance({ env: {}, execPath: other, installedService }));
    expect(asOther().value?.base).toBe("http://127.0.0.1:11999");
    writeFileSync(join(dir, "other", "gpu-turnstile.env"), "OLLAMA_URL=http://127.0.0.1:11435\nLISTEN_OLLAMA=127.0.0.1:12001\n");
    const { value, err } = asOther();
    expect(value).toEqual({ base: "http://127.0.0.1:12001", headers: {} });
    expect(err).toBe(`gpu-turnstile: config: ${join(dir, "other", "gpu-turnstile.env")} (beside this binary)\n`);
  });

  test("--config and GPU_TURNSTILE_CONFIG still win over the service's", async () => {
    const installedService = await installed();
    const mine = join(dir, "mine.env");
    writeFileSync(mine, "OLLAMA_URL=http://127.0.0.1:11435\nLISTEN_OLLAMA=127.0.0.1:12002\n");
    expect(stderrOf(() => findInstance({ configPath: mine, env: {}, execPath: LINUX_LAYOUT.binPath, installedService })).err).toContain(`config: ${mine} (given with --config)`);
    const viaEnv = stderrOf(() => findInstance({ env: { GPU_TURNSTILE_CONFIG: mine }, execPath: LINUX_LAYOUT.binPath, installedService }));
    expect(viaEnv.value?.base).toBe("http://127.0.0.1:12002");
    expect(viaEnv.err).toContain("(named by GPU_TURNSTILE_CONFIG)");
  });

  // Root reads any file: there the refusal cannot be staged.
  test.skipIf(process.getuid?.() === 0)("a service config the user may not read: the reason, and how to read it", async () => {
    const installedService = await installed();
    chmodSync(host(LINUX_LAYOUT.configPath), 0o000);
    const { value, err } = stderrOf(() => findInstance({ env: {}, execPath: LINUX_LAYOUT.binPath, installedService }));
    expect(value).toBeUndefined();
    expect(err).toContain(host(LINUX_LAYOUT.configPath));
    expect(err).toContain("run this as root (sudo)");
  });
});

describe("force-update finds the config as status does", () => {
  test("any copy replaces the installed service's binary with the settings of the service's config, and says which file", async () => {
    const installedService = await installed();
    const other = join(dir, "other", "gpu-turnstile");
    mkdirSync(join(dir, "other"));
    writeFileSync(join(dir, "other", "gpu-turnstile.env"), "OLLAMA_URL=http://127.0.0.1:11435\nAPP_VER=dev\n");
    for (const execPath of [LINUX_LAYOUT.binPath, other]) {
      const t = updateTarget({ env: {}, execPath, selfPath: execPath, installedService });
      expect(t.exe).toBe(LINUX_LAYOUT.binPath);
      expect(t.installed).toBe(true);
      expect(t.config.appVer).toBe("stable");
      expect(t.config.adminToken).toBe("the-service-token");
      expect(t.said).toBe(`config: ${host(LINUX_LAYOUT.configPath)} (the installed service's config: EnvironmentFile= in ${host(LINUX_LAYOUT.unitPath)})`);
    }
  });

  test("GPU_TURNSTILE_CONFIG wins over the service's config; a config without upstreams is no error here", async () => {
    const installedService = await installed();
    const mine = join(dir, "mine.env");
    writeFileSync(mine, "APP_VER=dev\n");
    const t = updateTarget({ env: { GPU_TURNSTILE_CONFIG: mine }, execPath: LINUX_LAYOUT.binPath, selfPath: LINUX_LAYOUT.binPath, installedService });
    expect(t.config.appVer).toBe("dev");
    expect(t.said).toBe(`config: ${mine} (named by GPU_TURNSTILE_CONFIG)`);
  });

  test("no service installed: this binary, and the file beside it", () => {
    const self = join(dir, "bin", "gpu-turnstile");
    writeFileSync(join(dir, "bin", "gpu-turnstile.env"), "APP_VER=dev\n");
    const t = updateTarget({ env: {}, execPath: self, selfPath: self, installedService: () => null });
    expect(t).toMatchObject({ exe: self, installed: false, said: `config: ${join(dir, "bin", "gpu-turnstile.env")} (beside this binary)` });
  });

  test("the command says which file it read", () => {
    const mine = join(dir, "mine.env");
    writeFileSync(mine, "APP_VER=dev\n");
    const run = Bun.spawnSync([process.execPath, join(import.meta.dir, "..", "..", "src", "main.ts"), "force-update"], {
      env: { ...process.env, GPU_TURNSTILE_CONFIG: mine, NO_COLOR: "1" },
      cwd: dir,
      stdout: "pipe",
      stderr: "pipe",
    });
    const err = run.stderr.toString();
    expect(err).toContain(`gpu-turnstile: config: ${mine} (named by GPU_TURNSTILE_CONFIG)\n`);
    expect(err).toContain("not updating");
    expect(run.exitCode).toBe(1);
  });
});

describe("the Windows service's config, from its registered command line", () => {
  const exe = "C:\\Program Files\\gpu-turnstile\\gpu-turnstile.exe";
  const qc = (binPath: string) => `SERVICE_NAME: gpu-turnstile\r\n        TYPE               : 10  WIN32_OWN_PROCESS\r\n        BINARY_PATH_NAME   : ${binPath}\r\n        DISPLAY_NAME       : gpu-turnstile\r\n`;

  test("an installed copy reads the file beside its exe, as the service does", () => {
    expect(fromScQc(qc(serviceBinPath(exe, WINDOWS_SERVICE_FLAG)))).toEqual({ exe, config: "C:\\Program Files\\gpu-turnstile\\gpu-turnstile.env", recordedIn: "beside the Windows service's exe" });
  });

  test("a --no-copy service told --config elsewhere: that file", () => {
    const config = "D:\\my configs\\gpu \"turnstile\".env";
    expect(fromScQc(qc(serviceBinPath("D:\\tools\\gpu-turnstile.exe", WINDOWS_SERVICE_FLAG, config)))).toEqual({
      exe: "D:\\tools\\gpu-turnstile.exe",
      config,
      recordedIn: "--config on the Windows service's command line",
    });
  });

  test("the command line splits back into what quoteWindowsArg joined", () => {
    const args = ["C:\\a b\\x.exe", "", "tail\\", 'q"uote', "back\\\\slash\\\"", "plain"];
    expect(splitWindowsCommandLine(args.map(quoteWindowsArg).join(" "))).toEqual(args);
  });
});
