/**
 * install-service / remove-service against a temporary root with a fake `systemctl` on PATH:
 * real files, real processes, only systemd itself is pretend.
 */
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseEnvFile } from "../../src/config/envfile.ts";
import { installLinux, LINUX_LAYOUT, removeLinux } from "../../src/service/linux-install.ts";
import { realConfigOps } from "../../src/service/index.ts";
import { FakePlatform } from "../../src/service/platform-fake.ts";
import { nodePlatform } from "../../src/service/platform-node.ts";
import { formatLines, type Outcome } from "../../src/service/report.ts";
import { parseUnit, unitValue } from "../../src/service/systemd-unit.ts";
import { standInConfig } from "./stand-ins.ts";

const FIXTURES = join(import.meta.dir, "fixtures");
/**
 * Not /tmp: a --no-copy install registers the test's "downloaded" binary where it is, and a unit
 * with PrivateTmp=yes refuses /tmp (its sandbox hides it). /dev/shm is not hidden by the unit.
 */
const WORK = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();

let dir: string;
let root: string;
let state: string;
let self: string;

function platform(extraEnv: Record<string, string> = {}) {
  return nodePlatform({
    root,
    env: { PATH: `${join(dir, "bin")}:${process.env.PATH}`, FAKE_SYSTEMCTL_STATE: state, ...extraEnv },
  });
}

/** systemctl calls since the last look, one string each. */
function takeCalls(): string[] {
  const file = join(state, "calls");
  if (!existsSync(file)) return [];
  const calls = readFileSync(file, "utf8").trim().split("\n").filter(Boolean);
  rmSync(file);
  return calls;
}

const host = (p: string) => join(root, p);
const text = (o: Outcome) => formatLines(o.lines);

beforeEach(() => {
  dir = mkdtempSync(join(WORK, "gt-linux-"));
  root = join(dir, "root");
  state = join(dir, "state");
  mkdirSync(join(root, "run/systemd/system"), { recursive: true });
  mkdirSync(state);
  mkdirSync(join(dir, "dl"));
  // A copy, made executable here: the exec bit of a checked-out fixture is not something to rely on.
  mkdirSync(join(dir, "bin"));
  copyFileSync(join(FIXTURES, "systemctl"), join(dir, "bin", "systemctl"));
  chmodSync(join(dir, "bin", "systemctl"), 0o755);
  self = join(dir, "dl", "gpu-turnstile");
  writeFileSync(self, "#!binary v1\n");
  chmodSync(self, 0o755);
});

afterEach(() => rmSync(dir, { recursive: true, force: true }));

const opts = () => ({ selfPath: self, noCopy: false, version: "v1.2.0", config: standInConfig });

describe("installLinux against a temporary root", () => {
  test("first install: binary, config from beside the binary, unit, enable --now", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n");
    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);

    expect(readFileSync(host(LINUX_LAYOUT.binPath), "utf8")).toBe("#!binary v1\n");
    expect(statSync(host(LINUX_LAYOUT.binPath)).mode & 0o777).toBe(0o755);
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toBe("CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n");
    const unit = parseUnit(readFileSync(host(LINUX_LAYOUT.unitPath), "utf8"));
    // The unit names the real system paths, not the test root.
    expect(unitValue(unit, "Service", "ExecStart")).toBe("/var/lib/gpu-turnstile/gpu-turnstile");
    expect(unitValue(unit, "Service", "EnvironmentFile")).toBe("-/etc/gpu-turnstile.env");
    expect(takeCalls()).toEqual(["daemon-reload", "enable --now gpu-turnstile.service"]);
    expect(text(out)).toContain("enabled and started");
  });

  test("re-run with nothing changed: stop, no copy, no unit write, start again", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    await installLinux(platform(), opts());
    takeCalls();
    // Every write is temp file + rename, so an untouched file keeps its inode.
    const inode = (p: string) => statSync(host(p)).ino;
    const before = [inode(LINUX_LAYOUT.binPath), inode(LINUX_LAYOUT.unitPath), inode(LINUX_LAYOUT.configPath)];

    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(takeCalls()).toEqual([
      "is-active gpu-turnstile.service",
      "is-enabled gpu-turnstile.service",
      "stop gpu-turnstile.service",
      "start gpu-turnstile.service",
    ]);
    expect([inode(LINUX_LAYOUT.binPath), inode(LINUX_LAYOUT.unitPath), inode(LINUX_LAYOUT.configPath)]).toEqual(before);
    expect(text(out)).toContain("is already this version");
    expect(text(out)).toContain("is up to date");
  });

  test("re-run with a new binary while stopped: binary replaced, left stopped", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    await installLinux(platform(), opts());
    rmSync(join(state, "active")); // the admin stopped it
    takeCalls();
    writeFileSync(self, "#!binary v2\n");

    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(host(LINUX_LAYOUT.binPath), "utf8")).toBe("#!binary v2\n");
    expect(takeCalls()).toEqual(["is-active gpu-turnstile.service", "is-enabled gpu-turnstile.service"]);
    expect(text(out)).toContain("updated /var/lib/gpu-turnstile/gpu-turnstile");
    expect(text(out)).toContain("left stopped");
  });

  test("a drifted unit is rewritten and reloaded; the diff is reported", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    await installLinux(platform(), opts());
    takeCalls();
    const unitPath = host(LINUX_LAYOUT.unitPath);
    writeFileSync(unitPath, readFileSync(unitPath, "utf8").replace("WatchdogSec=30", "WatchdogSec=90"));

    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(unitPath, "utf8")).toContain("WatchdogSec=30\n");
    expect(takeCalls()).toEqual([
      "is-active gpu-turnstile.service",
      "is-enabled gpu-turnstile.service",
      "stop gpu-turnstile.service",
      "daemon-reload",
      "start gpu-turnstile.service",
    ]);
    expect(text(out)).toContain("[Service] WatchdogSec: 90 → 30");
  });

  test("no config anywhere: a sample is written (0600), nothing registered, the message says what to set where", async () => {
    const out = await installLinux(platform(), opts());
    expect(out.exitCode).toBe(1);
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toStartWith("CFG_VER=v1.2.0\n");
    expect(statSync(host(LINUX_LAYOUT.configPath)).mode & 0o777).toBe(0o600);
    expect(takeCalls()).toEqual([]);
    expect(existsSync(host(LINUX_LAYOUT.unitPath))).toBe(false);
    expect(text(out)).toContain(`error: config: ${host(LINUX_LAYOUT.configPath)} is a fresh sample: set OLLAMA_URL and/or COMFY_URL there`);
    expect(text(out)).toContain(`error: fix ${host(LINUX_LAYOUT.configPath)}, then run install-service again (nothing was registered or started)`);

    // Set there, the next run installs and starts.
    writeFileSync(host(LINUX_LAYOUT.configPath), "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n");
    const again = await installLinux(platform(), opts());
    expect(again.exitCode, text(again)).toBe(0);
    expect(takeCalls()).toEqual(["daemon-reload", "enable --now gpu-turnstile.service"]);
  });

  test("an existing /etc config without CFG_VER is migrated, its setting kept, the old one kept as .bak (0600)", async () => {
    mkdirSync(host("/etc"), { recursive: true });
    writeFileSync(host(LINUX_LAYOUT.configPath), "OLLAMA_URL=http://127.0.0.1:1\n", { mode: 0o644 });
    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(host(`${LINUX_LAYOUT.configPath}.bak`), "utf8")).toBe("OLLAMA_URL=http://127.0.0.1:1\n");
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toBe("CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:1\n");
    expect(statSync(host(LINUX_LAYOUT.configPath)).mode & 0o777).toBe(0o600);
    expect(statSync(host(`${LINUX_LAYOUT.configPath}.bak`)).mode & 0o777).toBe(0o600);
    expect(takeCalls()).toEqual(["daemon-reload", "enable --now gpu-turnstile.service"]);
    expect(text(out)).toContain(".bak");
  });

  test("a config an older install left 0644 is tightened to 0600, content untouched", async () => {
    mkdirSync(host("/etc"), { recursive: true });
    writeFileSync(host(LINUX_LAYOUT.configPath), "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:1\n", { mode: 0o644 });
    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toBe("CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:1\n");
    expect(statSync(host(LINUX_LAYOUT.configPath)).mode & 0o777).toBe(0o600);
    expect(existsSync(host(`${LINUX_LAYOUT.configPath}.bak`))).toBe(false);
  });

  test("a --config the service could not start with is refused before anything changes, naming its file and line", async () => {
    const cfg = join(dir, "bad.env");
    writeFileSync(cfg, "OLLAMA_URL=http://127.0.0.1:11435\nJOB_TIMEOUT=soon\n");
    const out = await installLinux(platform(), { ...opts(), configPath: cfg, config: realConfigOps });
    expect(out.exitCode).toBe(1);
    expect(text(out)).toContain(`error: config: ${cfg}:2: JOB_TIMEOUT:`);
    expect(text(out)).toContain(`error: fix ${cfg}, then run install-service again (nothing was registered or started)`);
    expect(existsSync(host("/etc"))).toBe(false);
    expect(existsSync(host(LINUX_LAYOUT.binPath))).toBe(false);
    expect(takeCalls()).toEqual([]);
  });

  test("--no-copy registers the binary where it is and leaves the config alone", async () => {
    const cfg = join(dir, "my.env");
    writeFileSync(cfg, "OLLAMA_URL=http://127.0.0.1:2\n");
    const out = await installLinux(platform(), { ...opts(), noCopy: true, configPath: cfg });
    expect(out.exitCode, text(out)).toBe(0);
    expect(existsSync(host(LINUX_LAYOUT.binPath))).toBe(false);
    expect(existsSync(host(LINUX_LAYOUT.configPath))).toBe(false);
    expect(readFileSync(cfg, "utf8")).toBe("OLLAMA_URL=http://127.0.0.1:2\n");
    const unit = parseUnit(readFileSync(host(LINUX_LAYOUT.unitPath), "utf8"));
    expect(unitValue(unit, "Service", "ExecStart")).toBe(self);
    expect(unitValue(unit, "Service", "EnvironmentFile")).toBe(`-${cfg}`);
  });

  test("a failing start is an error with a journal hint", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    const out = await installLinux(platform({ FAKE_SYSTEMCTL_FAIL: "enable" }), opts());
    expect(out.exitCode).toBe(1);
    expect(text(out)).toContain("systemctl enable --now gpu-turnstile.service failed (exit 1): Job for --now failed (fake).");
    expect(text(out)).toContain("journalctl -u gpu-turnstile");
  });

  test("remove: stop, disable, unit and binary gone, /etc config kept", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "CFG_VER=v1.2.0\nCOMFY_URL=http://127.0.0.1:8189\n");
    await installLinux(platform(), opts());
    takeCalls();

    const out = await removeLinux(platform());
    expect(out.exitCode, text(out)).toBe(0);
    expect(takeCalls()).toEqual([
      "is-active gpu-turnstile.service",
      "stop gpu-turnstile.service",
      "is-enabled gpu-turnstile.service",
      "disable gpu-turnstile.service",
      "daemon-reload",
      "reset-failed gpu-turnstile.service",
    ]);
    expect(existsSync(host(LINUX_LAYOUT.unitPath))).toBe(false);
    expect(existsSync(host(LINUX_LAYOUT.binPath))).toBe(false);
    // Its folder, left empty, goes too.
    expect(existsSync(host(LINUX_LAYOUT.binDir))).toBe(false);
    expect(text(out)).toContain(`folder: removed ${LINUX_LAYOUT.binDir}`);
    expect(existsSync(host(LINUX_LAYOUT.configPath))).toBe(true);
    expect(text(out)).toContain("kept /etc/gpu-turnstile.env");

    const again = await removeLinux(platform());
    expect(again.exitCode).toBe(0);
    expect(text(again)).toContain("not installed");
  });

  test("--no-copy without any config is refused before registering", async () => {
    const out = await installLinux(platform(), { ...opts(), noCopy: true });
    expect(out.exitCode).toBe(1);
    expect(text(out)).toContain(`no config file at ${host(LINUX_LAYOUT.configPath)}`);
    expect(takeCalls()).toEqual([]);
  });

  test("--no-copy from /tmp, as citty parses the command line, is refused with the reason and the fix before any change (issue 28)", async () => {
    const { parseArgs } = await import("citty");
    const { installServiceArgs, noCopyFrom } = await import("../../src/cli/index.ts");
    const args = parseArgs(["--no-copy"], installServiceArgs);
    // citty turns --no-copy into the negation of `copy`; the flag's own name stays unset.
    expect(args).toMatchObject({ copy: false });
    expect(args["no-copy"]).toBeUndefined();
    const inTmp = mkdtempSync(join(tmpdir(), "gt-notmp-"));
    try {
      const binary = join(inTmp, "gpu-turnstile");
      writeFileSync(binary, "#!binary v1\n", { mode: 0o755 });
      writeFileSync(join(inTmp, "gpu-turnstile.env"), "COMFY_URL=http://127.0.0.1:8189\n");
      const out = await installLinux(platform(), { ...opts(), selfPath: binary, noCopy: noCopyFrom(args) });
      expect(out.exitCode).toBe(1);
      const said = text(out);
      expect(said).toContain(`--no-copy: the binary ${binary} is in /tmp, which the unit's sandbox hides from the service (PrivateTmp=yes): the service could not start.`);
      expect(said).toContain(`--no-copy: the config ${join(inTmp, "gpu-turnstile.env")} is in /tmp`);
      expect(said).toContain("Install without --no-copy");
      expect(said).toContain("or move the file out of /tmp first");
      expect(said).not.toContain("enabled and started");
      expect(takeCalls()).toEqual([]);
      expect(existsSync(host(LINUX_LAYOUT.unitPath))).toBe(false);
    } finally {
      rmSync(inTmp, { recursive: true, force: true });
    }
  });

  test.each([
    ["/tmp/x/gpu-turnstile", "/tmp", "PrivateTmp=yes"],
    ["/var/tmp/gpu-turnstile", "/var/tmp", "PrivateTmp=yes"],
    ["/home/ann/bin/gpu-turnstile", "/home", "ProtectHome=yes"],
    ["/root/gpu-turnstile", "/root", "ProtectHome=yes"],
    ["/run/user/1000/gpu-turnstile", "/run/user", "ProtectHome=yes"],
  ])("--no-copy of %p is refused: %p is hidden by %p", async (binary, dir, by) => {
    const out = await installLinux(platform(), { ...opts(), selfPath: binary, noCopy: true });
    expect(out.exitCode).toBe(1);
    expect(text(out)).toContain(`the binary ${binary} is in ${dir}, which the unit's sandbox hides from the service (${by})`);
    expect(takeCalls()).toEqual([]);
  });

  test("--no-copy with the binary in a visible place but its config in /var/tmp is refused, naming the config", async () => {
    const inVarTmp = mkdtempSync(join("/var/tmp", "gt-cfg-"));
    try {
      const cfg = join(inVarTmp, "gpu-turnstile.env");
      writeFileSync(cfg, "COMFY_URL=http://127.0.0.1:8189\n");
      const out = await installLinux(platform(), { ...opts(), noCopy: true, configPath: cfg });
      expect(out.exitCode).toBe(1);
      expect(text(out)).toContain(`--no-copy: the config ${cfg} is in /var/tmp, which the unit's sandbox hides from the service (PrivateTmp=yes): the service would not see it.`);
      expect(text(out)).not.toContain("--no-copy: the binary");
      expect(takeCalls()).toEqual([]);
    } finally {
      rmSync(inVarTmp, { recursive: true, force: true });
    }
  });

  test("remove after --no-copy leaves the user's binary alone", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "COMFY_URL=http://127.0.0.1:8189\n");
    const out1 = await installLinux(platform(), { ...opts(), noCopy: true });
    expect(out1.exitCode, text(out1)).toBe(0);
    const out = await removeLinux(platform());
    expect(out.exitCode, text(out)).toBe(0);
    expect(existsSync(self)).toBe(true);
  });
});

describe("the README's install flow", () => {
  /** The example config exactly as README.md shows it. */
  function readmeExample(): string {
    const readme = readFileSync(join(import.meta.dir, "../../README.md"), "utf8");
    const m = /```sh\n(# gpu-turnstile\.env\n[^`]*)```/.exec(readme);
    if (!m) throw new Error("README.md has no example config block starting with '# gpu-turnstile.env'");
    return m[1]!;
  }

  test("the README's example installs and starts; the URLs survive, 0600; an edited --config is installed", async () => {
    const example = readmeExample();
    expect(example).not.toContain("CFG_VER");
    const cfg = join(dir, "gpu-turnstile.env");
    writeFileSync(cfg, example);
    const install = () => installLinux(platform(), { ...opts(), configPath: cfg, config: realConfigOps });
    const installed = () => readFileSync(host(LINUX_LAYOUT.configPath), "utf8");
    const settings = () => parseEnvFile(installed(), "installed").map((e) => `${e.key}=${e.value}`);

    const out = await install();
    expect(out.exitCode, text(out)).toBe(0);
    expect(takeCalls()).toEqual(["daemon-reload", "enable --now gpu-turnstile.service"]);
    expect(text(out)).toContain("enabled and started gpu-turnstile");
    expect(settings()).toEqual(["CFG_VER=v1.2.0", "APP_VER=stable", "OLLAMA_URL=http://127.0.0.1:11435", "COMFY_URL=http://127.0.0.1:8189"]);
    expect(statSync(host(LINUX_LAYOUT.configPath)).mode & 0o777).toBe(0o600);
    expect(text(out)).toContain("remove with: sudo /var/lib/gpu-turnstile/gpu-turnstile remove-service");

    // The same file again: nothing to replace, no .bak.
    const same = await install();
    expect(same.exitCode, text(same)).toBe(0);
    expect(text(same)).toContain(`config: ${host(LINUX_LAYOUT.configPath)} already matches ${cfg}`);
    expect(existsSync(host(`${LINUX_LAYOUT.configPath}.bak`))).toBe(false);
    takeCalls();

    // Edited: installed, the previous one kept as .bak, the running service restarted with it.
    const before = installed();
    writeFileSync(cfg, example.replace("http://127.0.0.1:8189", "http://127.0.0.1:8190"));
    const edited = await install();
    expect(edited.exitCode, text(edited)).toBe(0);
    expect(settings()).toContain("COMFY_URL=http://127.0.0.1:8190");
    expect(readFileSync(host(`${LINUX_LAYOUT.configPath}.bak`), "utf8")).toBe(before);
    expect(statSync(host(`${LINUX_LAYOUT.configPath}.bak`)).mode & 0o777).toBe(0o600);
    expect(text(edited)).toContain(`config: ${host(LINUX_LAYOUT.configPath)} replaced by ${cfg} (they differed)`);
    expect(takeCalls()).toEqual(["is-active gpu-turnstile.service", "is-enabled gpu-turnstile.service", "stop gpu-turnstile.service", "start gpu-turnstile.service"]);
  });

  test("without --config, an installed config wins over the one beside the binary, and the output says so", async () => {
    writeFileSync(join(dir, "dl", "gpu-turnstile.env"), "COMFY_URL=http://127.0.0.1:8189\n");
    mkdirSync(host("/etc"), { recursive: true });
    writeFileSync(host(LINUX_LAYOUT.configPath), "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n", { mode: 0o600 });
    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toBe("CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n");
    expect(text(out)).toContain(`not used: ${host(LINUX_LAYOUT.configPath)} exists (install it over that one with --config`);
  });
});

describe("installLinux refuses before touching anything", () => {
  test("not root: exit 1, clear message, no command run, no file written", async () => {
    const p = new FakePlatform({ elevated: false });
    p.seed("/opt/gpu-turnstile", "bin");
    const out = await installLinux(p, { ...opts(), selfPath: "/opt/gpu-turnstile" });
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("needs root: run it again with sudo");
    expect(p.calls).toEqual([]);
    expect(p.changes).toEqual([]);
    const removed = await removeLinux(p);
    expect(removed.exitCode).toBe(1);
    expect(p.changes).toEqual([]);
  });

  test("no systemd running: exit 1, nothing changed", async () => {
    const p = new FakePlatform();
    p.seed("/opt/gpu-turnstile", "bin");
    const out = await installLinux(p, { ...opts(), selfPath: "/opt/gpu-turnstile" });
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("systemd is not running");
    expect(p.changes).toEqual([]);
  });

  test("running from source (bun itself) is refused", async () => {
    const p = new FakePlatform().seedDir("/run/systemd/system");
    const out = await installLinux(p, { ...opts(), selfPath: "/usr/local/bin/bun" });
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("built binary");
    expect(p.changes).toEqual([]);
  });

  test("a -config path that does not exist is refused", async () => {
    const p = new FakePlatform().seedDir("/run/systemd/system").seed("/opt/gpu-turnstile", "bin");
    const out = await installLinux(p, { ...opts(), selfPath: "/opt/gpu-turnstile", configPath: "/nope.env" });
    expect(out.exitCode).toBe(1);
    expect(formatLines(out.lines)).toContain("/nope.env");
    expect(p.changes).toEqual([]);
    expect(p.calls).toEqual([]);
  });

  test("a failure after stopping starts the old installation again", async () => {
    const p = new FakePlatform({
      script: (cmd, args) => (args[0] === "is-active" ? { code: 0, stdout: "active\n", stderr: "" } : undefined),
    });
    p.seedDir("/run/systemd/system").seed("/opt/gpu-turnstile", "bin").seed(LINUX_LAYOUT.unitPath, "[Service]\n");
    p.seed(LINUX_LAYOUT.configPath, "CFG_VER=v1.2.0\nOLLAMA_URL=http://127.0.0.1:11435\n", 0o600);
    // /var/lib exists as a file: mkdir fails after the stop.
    p.seed("/var/lib/gpu-turnstile", "not a dir");
    const out = await installLinux(p, { ...opts(), selfPath: "/opt/gpu-turnstile" });
    expect(out.exitCode).toBe(1);
    expect(p.commandLines()).toContain("systemctl start gpu-turnstile.service");
    expect(formatLines(out.lines)).toContain("install-service failed");
  });
});
