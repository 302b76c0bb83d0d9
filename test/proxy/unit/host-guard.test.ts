import { describe, expect, test } from "bun:test";
import { hostGuard, hostName, isLoopbackBind, NO_EXTRA_HOSTS, parseAllowedHosts, type HostGuardOptions } from "../../../src/proxy/host-guard.ts";

const MACHINE: Omit<HostGuardOptions, "bindHost" | "allowed"> = {
  machineName: "GpuBox",
  machineAddresses: () => ["127.0.0.1", "::1", "203.0.113.9", "2001:db8::9", "fe80::1"],
};
const loopback = (allowed = NO_EXTRA_HOSTS) => hostGuard({ ...MACHINE, bindHost: "127.0.0.1", allowed });

describe("a listener bound to loopback: Ollama's allowedHostsMiddleware", () => {
  const allowed = loopback();
  test.each([
    "",
    "localhost",
    "localhost:11434",
    "LOCALHOST:11434",
    "gpubox",
    "GpuBox:11434",
    "app.localhost:8188",
    "printer.local",
    "host.docker.internal:11434",
    "127.0.0.1:11434",
    "127.1.2.3",
    "[::1]:11434",
    "[::1]",
    "0.0.0.0:11434",
    "[::]:11434",
    "10.1.2.3:11434",
    "172.16.0.1",
    "172.31.255.255:1",
    "192.168.1.20:11434",
    "[fd00::1]:11434",
    "[fc12:3456::1]",
    "[::ffff:192.168.1.2]:11434",
    "203.0.113.9:11434",
    "[2001:DB8:0::9]:11434",
  ])("passes Host %p", (host) => {
    expect(allowed(host)).toBe(true);
  });

  test.each([
    "evil.example:11434",
    "evil.example",
    "localhost.evil.example",
    "evil.example.localhostx",
    "local",
    "internal",
    "gpubox.evil.example",
    "8.8.8.8:11434",
    "172.32.0.1",
    "192.169.0.1",
    "[2001:db8::8]:11434",
    "010.0.0.1",
    "0x7f.0.0.1",
    "localhost.",
  ])("refuses Host %p", (host) => {
    expect(allowed(host)).toBe(false);
  });

  test("a refused Host stays refused when asked again (nothing cached wrongly)", () => {
    expect(allowed("evil.example:11434")).toBe(false);
    expect(allowed("evil.example:11434")).toBe(false);
    expect(allowed("localhost:11434")).toBe(true);
    expect(allowed("localhost:11434")).toBe(true);
  });

  test("an address this machine gains later passes then (refusals are not remembered)", () => {
    const addrs = ["127.0.0.1"];
    const g = hostGuard({ bindHost: "127.0.0.1", allowed: NO_EXTRA_HOSTS, machineName: "x", machineAddresses: () => addrs });
    expect(g("198.51.100.4:11434")).toBe(false);
    addrs.push("198.51.100.4");
    expect(g("198.51.100.4:11434")).toBe(true);
  });

  test("machine addresses are asked only for a public IP Host", () => {
    let asked = 0;
    const g = hostGuard({ bindHost: "::1", allowed: NO_EXTRA_HOSTS, machineName: "x", machineAddresses: () => (asked++, []) });
    for (const h of ["localhost", "evil.example", "10.0.0.1", "[::1]:1"]) g(h);
    expect(asked).toBe(0);
    g("8.8.8.8");
    expect(asked).toBe(1);
  });
});

describe("ALLOWED_HOSTS adds names to the loopback rule", () => {
  test("names and *.suffix wildcards, any case, with or without port", () => {
    const g = loopback(parseAllowedHosts("gpu.lan, *.Home.Arpa ,[2001:db8::8]"));
    expect(g("gpu.lan:11434")).toBe(true);
    expect(g("GPU.LAN")).toBe(true);
    expect(g("box.home.arpa:8188")).toBe(true);
    expect(g("a.b.home.arpa")).toBe(true);
    expect(g("[2001:db8::8]:11434")).toBe(true);
    expect(g("home.arpa")).toBe(false);
    expect(g("gpu.lan.evil.example")).toBe(false);
    expect(g("xgpu.lan")).toBe(false);
    expect(g("evil.example:11434")).toBe(false);
  });

  test('"*" lets any Host through', () => {
    expect(loopback(parseAllowedHosts("*"))("evil.example:11434")).toBe(true);
  });

  test("empty is the rule alone", () => {
    expect(parseAllowedHosts("")).toEqual(NO_EXTRA_HOSTS);
    expect(parseAllowedHosts(" , ")).toEqual(NO_EXTRA_HOSTS);
  });
});

describe("a listener bound elsewhere lets any Host through, as Ollama does", () => {
  test.each([undefined, "0.0.0.0", "::", "192.168.1.5", "gpubox"])("bound to %p", (bindHost) => {
    const g = hostGuard({ ...MACHINE, bindHost, allowed: NO_EXTRA_HOSTS });
    expect(g("evil.example:11434")).toBe(true);
  });

  test.each([
    ["127.0.0.1", true],
    ["127.0.0.2", true],
    ["::1", true],
    ["localhost", true],
    ["LocalHost", true],
    ["ts.localhost", true],
    [undefined, false],
    ["0.0.0.0", false],
    ["::", false],
    ["10.0.0.1", false],
    ["localhost.example", false],
  ] as const)("isLoopbackBind(%p) is %p", (bind, want) => {
    expect(isLoopbackBind(bind)).toBe(want);
  });
});

test.each([
  ["localhost:11434", "localhost"],
  ["LocalHost", "localhost"],
  ["[::1]:11434", "::1"],
  ["[::1]", "::1"],
  ["10.0.0.1:80", "10.0.0.1"],
  ["", ""],
])("hostName(%p) is %p", (header, name) => {
  expect(hostName(header)).toBe(name);
});
