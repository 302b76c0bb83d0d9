/**
 * install-service / remove-service against a temporary root with a fake `systemctl` on PATH:
 * real files, real processes, only systemd itself is pretend.
 */
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { installLinux, LINUX_LAYOUT, removeLinux } from "../../src/service/linux-install.ts";
import { FakePlatform } from "../../src/service/platform-fake.ts";
import { nodePlatform } from "../../src/service/platform-node.ts";
import { formatLines, type Outcome } from "../../src/service/report.ts";
import { parseUnit, unitValue } from "../../src/service/systemd-unit.ts";
import { standInConfig } from "./stand-ins.ts";

const FIXTURES = join(import.meta.dir, "fixtures");

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
  dir = mkdtempSync(join(tmpdir(), "gt-linux-"));
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

  test("no config anywhere: a sample is written and the service is enabled but not started", async () => {
    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toStartWith("CFG_VER=v1.2.0\n");
    expect(takeCalls()).toEqual(["daemon-reload", "enable gpu-turnstile.service"]);
    expect(text(out)).toContain("Set OLLAMA_URL and/or COMFY_URL");
  });

  test("an existing /etc config without CFG_VER is replaced and kept as .bak", async () => {
    mkdirSync(host("/etc"), { recursive: true });
    writeFileSync(host(LINUX_LAYOUT.configPath), "OLLAMA_URL=http://127.0.0.1:1\n");
    const out = await installLinux(platform(), opts());
    expect(out.exitCode, text(out)).toBe(0);
    expect(readFileSync(host(`${LINUX_LAYOUT.configPath}.bak`), "utf8")).toBe("OLLAMA_URL=http://127.0.0.1:1\n");
    expect(readFileSync(host(LINUX_LAYOUT.configPath), "utf8")).toStartWith("CFG_VER=v1.2.0\n");
    expect(out.lines.some((l) => l.level === "warn" && l.text.includes(".bak"))).toBe(true);
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
    expect(existsSync(host(LINUX_LAYOUT.configPath))).toBe(true);
    expect(text(out)).toContain("kept /etc/gpu-turnstile.env");

    const again = await removeLinux(platform());
    expect(again.exitCode).toBe(0);
    expect(text(again)).toContain("not installed");
  });

  test("remove after --no-copy leaves the user's binary alone", async () => {
    const out1 = await installLinux(platform(), { ...opts(), noCopy: true });
    expect(out1.exitCode, text(out1)).toBe(0);
    const out = await removeLinux(platform());
    expect(out.exitCode, text(out)).toBe(0);
    expect(existsSync(self)).toBe(true);
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
    // /var/lib exists as a file: mkdir fails after the stop.
    p.seed("/var/lib/gpu-turnstile", "not a dir");
    const out = await installLinux(p, { ...opts(), selfPath: "/opt/gpu-turnstile" });
    expect(out.exitCode).toBe(1);
    expect(p.commandLines()).toContain("systemctl start gpu-turnstile.service");
    expect(formatLines(out.lines)).toContain("install-service failed");
  });
});
