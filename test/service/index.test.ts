import { describe, expect, test } from "bun:test";
import { systemdHost, type Timers } from "../../src/service/host.ts";
import { configVersion, install, remove, runAsServiceIfRequested, WINDOWS_SERVICE_FLAG } from "../../src/service/index.ts";
import { LINUX_LAYOUT } from "../../src/service/linux-install.ts";
import type { Notifier } from "../../src/service/notify.ts";
import { FakePlatform } from "../../src/service/platform-fake.ts";
import type { ReportLine } from "../../src/service/report.ts";
import { FakeScm } from "./fake-scm.ts";

describe("install / remove entry points", () => {
  test("Linux, real sample module: a dev build stamps CFG_VER=v0.0.0 in a full sample; nothing registered until it is set", async () => {
    const p = new FakePlatform().seedDir("/run/systemd/system").seed("/opt/gt/gpu-turnstile", "bin");
    const lines: ReportLine[] = [];
    const code = await install({ argv: ["install-service"], platform: p, selfPath: "/opt/gt/gpu-turnstile", version: "dev", onLine: (l) => lines.push(l) });
    expect(code).toBe(1);
    const cfg = p.file(LINUX_LAYOUT.configPath)!;
    expect(cfg).toStartWith("CFG_VER=v0.0.0\n");
    expect(cfg).toMatch(/^# OLLAMA_URL=/m);
    expect(cfg).toMatch(/^# LOG_FILE=/m); // commented on Linux: the journal has the logs
    expect(p.modeOf(LINUX_LAYOUT.configPath)).toBe(0o600);
    expect(p.commandLines()).toEqual([]);
    expect(lines.map((l) => l.text)).toContain("fix /etc/gpu-turnstile.env, then run install-service again (nothing was registered or started)");
  });

  test("Windows, real sample module: the sample's LOG_FILE is active and not added twice", async () => {
    const p = new FakePlatform({ os: "win32", env: { ProgramFiles: "C:\\Program Files", ProgramData: "C:\\ProgramData" } });
    p.seed("C:\\dl\\gpu-turnstile.exe", "exe");
    new FakeScm(p);
    p.seed("C:\\dl\\gpu-turnstile.env", "OLLAMA_URL=http://127.0.0.1:11435\n");
    const lines: ReportLine[] = [];
    const code = await install({ argv: [], platform: p, selfPath: "C:\\dl\\gpu-turnstile.exe", version: "v1.4.0", onLine: (l) => lines.push(l) });
    expect(code, lines.map((l) => l.text).join("\n")).toBe(0);
    const cfg = p.file("C:\\Program Files\\gpu-turnstile\\gpu-turnstile.env")!;
    expect(cfg).toStartWith("CFG_VER=v1.4.0\n");
    expect(cfg.match(/^LOG_FILE=.*$/gm)).toEqual(["LOG_FILE=C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log"]);
  });

  test("Windows without elevation relaunches through UAC and mirrors the exit code", async () => {
    const p = new FakePlatform({ os: "win32", elevated: false, env: { TEMP: "C:\\t" } });
    p.script = (cmd) => (cmd === "powershell.exe" ? { code: 7, stdout: "", stderr: "" } : undefined);
    const code = await remove({ argv: ["remove-service"], platform: p, selfPath: "C:\\dl\\gpu-turnstile.exe", onLine: () => {} });
    expect(code).toBe(7);
    expect(p.calls.map((c) => c.cmd)).toEqual(["powershell.exe"]);
  });

  test("configVersion: only exact releases pass through", () => {
    expect(configVersion("v1.2.3")).toBe("v1.2.3");
    expect(configVersion("v1.2.3-4-gabcdef")).toBe("v0.0.0");
    expect(configVersion("dev")).toBe("v0.0.0");
  });
});

describe("runAsServiceIfRequested", () => {
  test("a console run: argv unchanged, a host that does nothing", async () => {
    const s = await runAsServiceIfRequested(["--config", "x.env"], { os: "linux", env: {} });
    expect(s.argv).toEqual(["--config", "x.env"]);
    expect(s.host.kind).toBe("console");
    expect(s.host.problem).toBeUndefined();
  });

  test("the Windows service flag is removed from argv; off Windows it is only a warning", async () => {
    const s = await runAsServiceIfRequested([WINDOWS_SERVICE_FLAG, "--config", "x.env"], { os: "linux", env: {} });
    expect(s.argv).toEqual(["--config", "x.env"]);
    expect(s.host.kind).toBe("console");
    expect(s.host.problem).toContain("only means something on Windows");
  });

  test("under systemd (NOTIFY_SOCKET set) the host speaks sd_notify", async () => {
    const s = await runAsServiceIfRequested([], { os: "linux", env: { NOTIFY_SOCKET: "@gpu-turnstile-idx-test" } });
    expect(s.host.kind).toBe("systemd");
    s.host.stopped(0);
  });

  test("an unusable NOTIFY_SOCKET: console host with the reason", async () => {
    const s = await runAsServiceIfRequested([], { os: "linux", env: { NOTIFY_SOCKET: "relative/path" } });
    expect(s.host.kind).toBe("console");
    expect(s.host.problem).toContain("NOTIFY_SOCKET=relative/path");
  });
});

describe("systemdHost", () => {
  function fakeNotifier(watchdogIntervalMs?: number) {
    const sent: string[] = [];
    const n: Notifier = {
      enabled: true,
      ...(watchdogIntervalMs ? { watchdogIntervalMs } : {}),
      ready: () => !!sent.push("READY=1"),
      watchdog: () => !!sent.push("WATCHDOG=1"),
      stopping: () => !!sent.push("STOPPING=1"),
      status: (t) => !!sent.push(`STATUS=${t}`),
      send: (m) => !!sent.push(m),
      close: () => void sent.push("(closed)"),
    };
    return { n, sent };
  }
  function fakeTimers() {
    const timers = new Map<number, { fn: () => void; ms: number }>();
    let next = 1;
    const t: Timers = {
      setInterval: (fn, ms) => {
        timers.set(next, { fn, ms });
        return next++;
      },
      clearInterval: (h) => void timers.delete(h as number),
    };
    return { t, timers };
  }

  test("pings the watchdog at the notifier's interval until stopped", () => {
    const { n, sent } = fakeNotifier(15_000);
    const { t, timers } = fakeTimers();
    const host = systemdHost(n, t);
    expect([...timers.values()].map((x) => x.ms)).toEqual([15_000]);
    [...timers.values()][0]!.fn();
    host.ready();
    host.status("state=idle");
    host.status("state=idle"); // unchanged: not sent again
    host.status("state=llm");
    host.stopping();
    host.stopped(0);
    expect(timers.size).toBe(0);
    expect(sent).toEqual(["WATCHDOG=1", "READY=1", "STATUS=state=idle", "STATUS=state=llm", "STOPPING=1", "(closed)"]);
  });

  test("no watchdog configured: no timer", () => {
    const { n } = fakeNotifier();
    const { t, timers } = fakeTimers();
    systemdHost(n, t);
    expect(timers.size).toBe(0);
  });
});
