/**
 * Issue 26 point 6: one turnstile per card however it is spelled. A name is claimed at the
 * addresses it resolves to (Debian maps the machine's own name to 127.0.1.1 in /etc/hosts), and
 * `*.localhost` is loopback by definition.
 */
import { describe, expect, test } from "bun:test";
import { hostname, networkInterfaces } from "node:os";
import { claimCard, type ClaimOptions, needsLookup, type ResolveHost, upstreamKey, upstreamKeys } from "../../src/runtime/card-claim.ts";
import { claimSocket } from "../../src/runtime/claim-socket.ts";
import { FakeMachine } from "../../src/runtime/claim-socket-fake.ts";
import { resolveHost } from "../../src/runtime/resolve-host.ts";

const MACHINE = { name: "gpu-box", addresses: ["127.0.0.1", "192.168.1.5", "::1"] };
const LOCAL = upstreamKey("http://127.0.0.1:11434");

describe("keys from what a name resolves to (pure)", () => {
  test("names under .localhost are this machine without asking anyone", () => {
    for (const name of ["foo.localhost", "FOO.Localhost.", "a.b.localhost"]) {
      expect(needsLookup(new URL(`http://${name}:1`).hostname, MACHINE)).toBe(false);
      expect(upstreamKeys(`http://${name}:11434`, MACHINE)).toEqual([LOCAL]);
    }
    expect(upstreamKey("http://localhost.example:11434")).not.toBe(LOCAL);
  });

  test("only names are looked up: IP literals and the machine's known names are not", () => {
    for (const host of ["127.0.0.1", "[::1]", "192.168.1.9", "localhost", "gpu-box"]) expect(needsLookup(new URL(`http://${host}:1`).hostname, MACHINE)).toBe(false);
    for (const host of ["debian-pc", "ollama.lan", "host.docker.internal"]) expect(needsLookup(host, MACHINE)).toBe(true);
  });

  test("every loopback answer (127.0.1.1, ::1, ::ffff:127.x, 0.0.0.0, ::) and the machine's own addresses are one key, with the port", () => {
    for (const resolved of [["127.0.1.1"], ["::1"], ["::ffff:127.0.1.1"], ["0.0.0.0"], ["::"], ["192.168.1.5"], ["fe80::1%eth0", "127.0.1.1"]]) {
      const keys = upstreamKeys("http://debian-pc:11434", MACHINE, resolved);
      expect(`${resolved} ${keys.includes(LOCAL)}`).toBe(`${resolved} true`);
    }
    expect(upstreamKeys("http://debian-pc:11435", MACHINE, ["127.0.1.1"])).not.toContain(LOCAL);
  });

  test("a name with several addresses is claimed at each; the same address under two names is one key", () => {
    const both = upstreamKeys("http://ollama.lan:11434", MACHINE, ["10.0.0.7", "fd00::7", "10.0.0.7"]);
    expect(both).toEqual(["http://10.0.0.7:11434", "http://[fd00::7]:11434"]);
    expect(upstreamKeys("http://other-name.lan:11434", MACHINE, ["fd00::7"])).toEqual(["http://[fd00::7]:11434"]);
    expect(upstreamKey("http://10.0.0.7:11434")).toBe(both[0]!);
  });
});

describe("claiming with a resolver", () => {
  const fakeDns: Record<string, string[]> = { "debian-pc": ["127.0.1.1"], "ollama.lan": ["10.0.0.7", "10.0.0.8"], "ollama-b.lan": ["10.0.0.8"] };
  const resolve: ResolveHost = async (name) => {
    const found = fakeDns[name];
    if (!found) throw new Error("ENOTFOUND");
    return found;
  };
  const opts = (m: FakeMachine, proc: string, upstreams: string[]): ClaimOptions => ({
    upstreams,
    socket: m.socket(proc),
    system: "linux",
    tmpdir: "/tmp",
    pid: Number(proc.slice(1)),
    listening: [],
    machine: { name: "debian-pc-but-renamed", addresses: [] },
    resolve,
  });

  test("the machine's /etc/hosts name, foo.localhost and 127.0.0.1 are one card", async () => {
    const m = new FakeMachine();
    expect((await claimCard(opts(m, "p1", ["http://127.0.0.1:11434"]))).ok).toBe(true);
    for (const spelled of ["http://debian-pc:11434", "http://foo.localhost:11434"]) {
      const second = await claimCard(opts(m, "p2", [spelled]));
      expect(second).toMatchObject({ ok: false, message: expect.stringContaining(`already guards ${spelled}`) });
    }
  });

  test("two names sharing one address of several are one card", async () => {
    const m = new FakeMachine();
    expect((await claimCard(opts(m, "p1", ["http://ollama.lan:11434"]))).ok).toBe(true);
    expect((await claimCard(opts(m, "p2", ["http://ollama-b.lan:11434"]))).ok).toBe(false);
    expect((await claimCard(opts(m, "p3", ["http://10.0.0.7:11434"]))).ok).toBe(false);
    expect((await claimCard(opts(m, "p4", ["http://ollama-b.lan:11435"]))).ok).toBe(true);
  });

  test("a name that does not resolve fails the claim, saying which and what to do, and holds nothing", async () => {
    const m = new FakeMachine();
    const claim = claimCard(opts(m, "p1", ["http://127.0.0.1:8188", "http://gone.lan:11434"]));
    await expect(claim).rejects.toThrow("the upstream host gone.lan does not resolve (ENOTFOUND), so it cannot be told whether it names this machine; use an IP address, or start once the name resolves");
    await claim.catch(() => {});
    expect(m.claims.size).toBe(0);
  });
});

describe.if(process.platform === "linux")("with this machine's resolver and sockets", () => {
  test("the machine's own host name, and foo.localhost, are refused while 127.0.0.1 is claimed", async () => {
    const port = 20000 + ((process.pid + 7) % 20000);
    const own = Object.values(networkInterfaces()).flatMap((l) => (l ?? []).map((a) => a.address));
    const base = { socket: claimSocket("linux"), system: "linux" as const, tmpdir: "/tmp", listening: ["http://127.0.0.1:1"], resolve: resolveHost };
    // Not told its own name: only the resolver can say that the host name is this machine.
    const machine = { name: "not-this-machine", addresses: own };
    const first = await claimCard({ ...base, upstreams: [`http://127.0.0.1:${port}`], pid: process.pid, machine });
    if (!first.ok) throw new Error(first.message);
    try {
      for (const name of [hostname(), "foo.localhost"]) {
        const second = await claimCard({ ...base, upstreams: [`http://${name}:${port}`], pid: 1, machine });
        expect(second).toMatchObject({ ok: false, message: expect.stringContaining(`already guards http://${name.toLowerCase()}:${port}`) });
      }
    } finally {
      first.claim.release();
    }
  });

  test("a name nobody knows fails within the bound", async () => {
    await expect(resolveHost("no-such-host.invalid")).rejects.toThrow(/ENOTFOUND|EAI_|no answer/);
    await expect(resolveHost("no-such-host.invalid", 1)).rejects.toThrow(/ENOTFOUND|no answer from the resolver within 1 ms/);
  });
});
