import { describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { diffUnits, execPathOf, hiddenBySandbox, hiddenDirOf, parseUnit, renderUnit, unitValue } from "../../src/service/systemd-unit.ts";

const unit = renderUnit({ execPath: "/var/lib/gpu-turnstile/gpu-turnstile", configPath: "/etc/gpu-turnstile.env" });
const entries = parseUnit(unit);

describe("renderUnit", () => {
  // The SPEC's unit, setting by setting.
  const want: [string, string, string][] = [
    ["Unit", "Wants", "network-online.target"],
    ["Unit", "After", "network-online.target"],
    ["Service", "Type", "notify"],
    ["Service", "ExecStart", "/var/lib/gpu-turnstile/gpu-turnstile"],
    ["Service", "EnvironmentFile", "-/etc/gpu-turnstile.env"],
    ["Service", "WatchdogSec", "30"],
    ["Service", "Restart", "on-failure"],
    ["Service", "RestartSec", "5s"],
    ["Service", "Environment", "BUN_CONFIG_MAX_HTTP_REQUESTS=65535"],
    ["Service", "LogsDirectory", "gpu-turnstile"],
    ["Service", "DynamicUser", "yes"],
    ["Service", "StateDirectory", "gpu-turnstile"],
    ["Service", "ProtectSystem", "strict"],
    ["Service", "NoNewPrivileges", "yes"],
    ["Service", "ProtectHome", "yes"],
    ["Service", "PrivateTmp", "yes"],
    ["Service", "ProtectKernelTunables", "yes"],
    ["Service", "ProtectKernelModules", "yes"],
    ["Service", "ProtectKernelLogs", "yes"],
    ["Service", "ProtectControlGroups", "yes"],
    ["Service", "RestrictNamespaces", "yes"],
    ["Service", "RestrictSUIDSGID", "yes"],
    ["Service", "RestrictRealtime", "yes"],
    ["Service", "LockPersonality", "yes"],
    ["Service", "CapabilityBoundingSet", ""],
    ["Service", "AmbientCapabilities", ""],
    ["Service", "RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"],
    ["Service", "SystemCallFilter", "@system-service"],
    ["Install", "WantedBy", "multi-user.target"],
  ];
  test.each(want)("[%s] %s=%s", (section, key, value) => {
    expect(unitValue(entries, section, key)).toBe(value);
  });

  test("has exactly these settings plus a Description, each once", () => {
    const keys = entries.map((e) => `${e.section}.${e.key}`);
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys.sort()).toEqual([...want.map(([s, k]) => `${s}.${k}`), "Unit.Description"].sort());
  });

  test("MemoryDenyWriteExecute is left out, with the reason in a comment", () => {
    expect(unitValue(entries, "Service", "MemoryDenyWriteExecute")).toBeUndefined();
    expect(unit).toMatch(/# No MemoryDenyWriteExecute=yes: Bun's JIT and bun:ffi/);
  });

  test("paths with spaces, % and $ are quoted and escaped, and read back", () => {
    const odd = "/opt/my tools/gpu 100%/$x";
    const u = renderUnit({ execPath: odd, configPath: "/etc/a%b.env" });
    const parsed = parseUnit(u);
    expect(unitValue(parsed, "Service", "ExecStart")).toBe('"/opt/my tools/gpu 100%%/$$x"');
    expect(unitValue(parsed, "Service", "EnvironmentFile")).toBe("-/etc/a%%b.env");
    expect(execPathOf(parsed)).toBe(odd);
  });
});

describe("parseUnit and diffUnits", () => {
  test("comments, blank lines and continuations do not count as drift", () => {
    const reformatted = unit
      .replace(/^#.*\n/gm, "")
      .replace("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "RestrictAddressFamilies=AF_UNIX \\\n  AF_INET AF_INET6");
    expect(diffUnits(parseUnit(reformatted), entries)).toEqual([]);
  });

  test("changed, missing and extra settings are each named", () => {
    const drifted = unit
      .replace("WatchdogSec=30", "WatchdogSec=90")
      .replace("PrivateTmp=yes\n", "")
      .replace("[Install]", "MemoryDenyWriteExecute=yes\n[Install]");
    expect(diffUnits(parseUnit(drifted), entries)).toEqual([
      "[Service] WatchdogSec: 90 → 30",
      "[Service] PrivateTmp: missing, want yes",
      "[Service] MemoryDenyWriteExecute: yes is not wanted",
    ]);
  });

  test("execPathOf reads a plain ExecStart with arguments", () => {
    expect(execPathOf(parseUnit("[Service]\nExecStart=-/usr/bin/x --flag\n"))).toBe("/usr/bin/x");
    expect(execPathOf(parseUnit("[Unit]\n"))).toBeUndefined();
  });
});

// systemd's own checker, when it is installed (Debian package `systemd`; .ci/run installs it).
const analyze = Bun.which("systemd-analyze");
describe.skipIf(!analyze)("systemd-analyze verify", () => {
  test("accepts the rendered unit without a single warning", () => {
    const dir = mkdtempSync(join(tmpdir(), "gt-unit-"));
    try {
      const exe = join(dir, "gpu-turnstile");
      writeFileSync(exe, "#!/bin/sh\n");
      chmodSync(exe, 0o755);
      const file = join(dir, "gpu-turnstile.service");
      writeFileSync(file, renderUnit({ execPath: exe, configPath: "/etc/gpu-turnstile.env" }));
      const res = Bun.spawnSync([analyze!, "verify", file], { stderr: "pipe", stdout: "pipe" });
      const said = `${res.stdout.toString()}${res.stderr.toString()}`;
      expect(res.exitCode, said).toBe(0);
      // verify exits 0 on unknown keys and bad values, so its output must be checked too.
      expect(said.split("\n").filter((l) => l.includes("gpu-turnstile"))).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the check can fail: an unknown setting is reported", () => {
    const dir = mkdtempSync(join(tmpdir(), "gt-unit-"));
    try {
      const exe = join(dir, "gpu-turnstile");
      writeFileSync(exe, "#!/bin/sh\n");
      chmodSync(exe, 0o755);
      const file = join(dir, "gpu-turnstile.service");
      writeFileSync(file, renderUnit({ execPath: exe, configPath: "/etc/x.env" }).replace("[Install]", "ProtectKernelTunabels=yes\n[Install]"));
      const res = Bun.spawnSync([analyze!, "verify", file], { stderr: "pipe", stdout: "pipe" });
      expect(res.stderr.toString()).toContain("Unknown key 'ProtectKernelTunabels'");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
if (!analyze) console.warn("note: systemd-analyze not found (apt-get install systemd): unit verification skipped");

describe("the directories the unit's own sandbox hides (install-service --no-copy refuses them, issue 28)", () => {
  test("read from the unit install-service writes: /home, /root, /run/user (ProtectHome) and /tmp, /var/tmp (PrivateTmp)", () => {
    const hidden = hiddenBySandbox(parseUnit(renderUnit({ execPath: "/opt/gpu-turnstile/gpu-turnstile", configPath: "/etc/gpu-turnstile.env" })));
    expect(hidden.map((h) => h.dir).sort()).toEqual(["/home", "/root", "/run/user", "/tmp", "/var/tmp"]);
  });

  test("a path is hidden only inside the directory, not beside it", () => {
    const hidden = hiddenBySandbox(parseUnit("[Service]\nPrivateTmp=yes\nProtectHome=read-only\nInaccessiblePaths=-/srv/secret /mnt/x/\n"));
    expect(hidden.map((h) => h.dir)).toEqual(["/tmp", "/var/tmp", "/srv/secret", "/mnt/x"]);
    expect(hiddenDirOf("/tmp", hidden)?.by).toBe("PrivateTmp=yes");
    expect(hiddenDirOf("/tmpfiles/gpu-turnstile", hidden)).toBeUndefined();
    expect(hiddenDirOf("/home/ann/gpu-turnstile", hidden)).toBeUndefined();
    expect(hiddenDirOf("/srv/secret/gpu-turnstile.env", hidden)?.dir).toBe("/srv/secret");
  });
});
