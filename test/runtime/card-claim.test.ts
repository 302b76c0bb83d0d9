import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  claimAddress,
  claimCard,
  type ClaimOptions,
  holderLine,
  normalizeUpstream,
  parseHolderLine,
  refusal,
  upstreamKey,
} from "../../src/runtime/card-claim.ts";
import { claimSocket } from "../../src/runtime/claim-socket.ts";
import { FakeMachine } from "../../src/runtime/claim-socket-fake.ts";

describe("the upstream's one spelling", () => {
  test("scheme and host in lower case, the default port written, no credentials, query or trailing slash", () => {
    expect(normalizeUpstream("HTTP://Admin:S3cret@GPU-Box.LAN/")).toBe("http://gpu-box.lan:80");
    expect(normalizeUpstream("https://comfy.example/ui/?x=1#top")).toBe("https://comfy.example:443/ui");
    expect(normalizeUpstream("http://127.0.0.1:11434")).toBe("http://127.0.0.1:11434");
    expect(normalizeUpstream("http://[::1]:8188//")).toBe("http://[::1]:8188");
  });

  test("every loopback name is one upstream; other hosts, ports, schemes and paths are not", () => {
    const k = upstreamKey("http://localhost:11434");
    expect(upstreamKey("http://127.0.0.1:11434/")).toBe(k);
    expect(upstreamKey("http://[::1]:11434")).toBe(k);
    expect(upstreamKey("http://user:pw@LOCALHOST:11434")).toBe(k);
    for (const other of ["http://localhost:11435", "https://localhost:11434", "http://192.168.1.5:11434", "http://localhost:11434/ollama"]) {
      expect(upstreamKey(other)).not.toBe(k);
    }
  });

  test("this machine under any other spelling is the same upstream: a trailing dot, another loopback address, 0.0.0.0, its own name or LAN address", () => {
    const machine = { name: "GPU-Box", addresses: ["127.0.0.1", "192.168.1.5", "fe80::1%eth0", "fd00::5"] };
    const k = upstreamKey("http://localhost:11434", machine);
    for (const same of ["http://localhost.:11434", "http://127.0.0.1.:11434", "http://127.0.0.2:11434", "http://[::ffff:127.0.0.1]:11434", "http://0.0.0.0:11434", "http://[::]:11434", "http://gpu-box:11434", "http://GPU-Box.:11434", "http://192.168.1.5:11434", "http://[fd00::5]:11434"]) {
      expect(`${same} ${upstreamKey(same, machine)}`).toBe(`${same} ${k}`);
    }
    for (const other of ["http://192.168.1.6:11434", "http://gpu-box.example:11434", "http://localhost:11435"]) {
      expect(upstreamKey(other, machine)).not.toBe(k);
    }
  });

  test("an IPv4-mapped IPv6 spelling of 0.0.0.0 or of the machine's own IPv4 address is this machine too (a connect to it reaches the local server)", () => {
    const machine = { name: "GPU-Box", addresses: ["127.0.0.1", "192.168.1.5"] };
    const k = upstreamKey("http://localhost:8188", machine);
    for (const same of ["http://[::ffff:0.0.0.0]:8188", "http://[::ffff:0:0]:8188", "http://[::ffff:192.168.1.5]:8188", "http://[0:0:0:0:0:ffff:c0a8:105]:8188"]) {
      expect(`${same} ${upstreamKey(same, machine)}`).toBe(`${same} ${k}`);
    }
    expect(upstreamKey("http://[::ffff:192.168.1.6]:8188", machine)).not.toBe(k);
  });

  test("the address is the same for every start, and fits each system's limit", () => {
    const key = upstreamKey("http://127.0.0.1:8188");
    const linux = claimAddress(key, "linux", "/tmp");
    expect(linux).toBe(claimAddress(upstreamKey("http://localhost:8188/"), "linux", "/tmp"));
    expect(linux.startsWith("\0gpu-turnstile/")).toBe(true);
    expect(Buffer.byteLength(linux)).toBeLessThan(108);
    expect(claimAddress(key, "win32", "")).toMatch(/^\\\\\.\\pipe\\gpu-turnstile-[0-9a-f]{32}$/);
    expect(claimAddress(key, "other", "/var/folders/x/T/")).toMatch(/^\/var\/folders\/x\/T\/gpu-turnstile-[0-9a-f]{32}\.sock$/);
    expect(claimAddress(upstreamKey("http://127.0.0.1:8189"), "linux", "/tmp")).not.toBe(linux);
  });
});

describe("the holder's line", () => {
  test("round trip, and the one line a refused start prints", () => {
    const line = holderLine({ pid: 4242, listening: ["http://127.0.0.1:11435", "http://[::1]:8189"] });
    expect(line.endsWith("\n")).toBe(true);
    const h = parseHolderLine(line)!;
    expect(refusal("http://127.0.0.1:11434", h)).toBe(
      "another gpu-turnstile (pid 4242, listening on http://127.0.0.1:11435 and http://[::1]:8189) already guards http://127.0.0.1:11434",
    );
    expect(refusal("http://127.0.0.1:11434", undefined)).toBe("another gpu-turnstile (pid unknown) already guards http://127.0.0.1:11434");
  });

  test("whatever else listens there is not believed: no pid, no escape sequences in the terminal", () => {
    expect(parseHolderLine("SSH-2.0-OpenSSH_9.2\r\n")).toBeUndefined();
    expect(parseHolderLine('{"pid":-1,"listening":[]}')).toBeUndefined();
    expect(parseHolderLine('{"pid":"1"}')).toBeUndefined();
    expect(parseHolderLine('{"pid":7,"listening":["\\u001b[2Jhttp://x","http://ok:1",3]}\n')).toEqual({ pid: 7, listening: ["http://ok:1"] });
  });
});

describe("claiming the card's upstreams", () => {
  const OLLAMA = "http://127.0.0.1:11434";
  const COMFY = "http://127.0.0.1:8188";
  const opts = (machine: FakeMachine, proc: string, upstreams: string[], over: Partial<ClaimOptions> = {}): ClaimOptions => ({
    upstreams,
    socket: machine.socket(proc),
    system: "linux",
    tmpdir: "/tmp",
    pid: Number(proc.slice(1)),
    listening: [`127.0.0.1:${proc.slice(1)}`],
    ...over,
  });

  test("a second instance for the same upstreams is refused, naming the first's pid and listeners", async () => {
    const m = new FakeMachine();
    const first = await claimCard(opts(m, "p100", [OLLAMA, COMFY]));
    if (!first.ok) throw new Error(first.message);
    first.claim.listening = ["http://127.0.0.1:11435", "http://127.0.0.1:8189"];
    const second = await claimCard(opts(m, "p200", [`http://localhost:11434/`, "http://[::1]:8188"]));
    expect(second).toEqual({
      ok: false,
      // Named in its own spelling: the operator recognizes the URL from their own config.
      message: "another gpu-turnstile (pid 100, listening on http://127.0.0.1:11435 and http://127.0.0.1:8189) already guards http://localhost:11434",
    });
  });

  test("sharing only the ComfyUI is enough to be refused, and a refused start keeps nothing", async () => {
    const m = new FakeMachine();
    expect((await claimCard(opts(m, "p1", [COMFY]))).ok).toBe(true);
    const second = await claimCard(opts(m, "p2", ["http://127.0.0.1:11499", COMFY]));
    expect(second.ok).toBe(false);
    if (!second.ok) expect(second.message).toEndWith("already guards http://127.0.0.1:8188");
    expect([...m.claims.values()].map((c) => c.process)).toEqual(["p1"]);
    // Its Ollama is free for a third instance that guards only that one.
    expect((await claimCard(opts(m, "p3", ["http://127.0.0.1:11499"]))).ok).toBe(true);
  });

  test("two cards on one machine: instances with different upstreams run side by side", async () => {
    const m = new FakeMachine();
    expect((await claimCard(opts(m, "p1", [OLLAMA, COMFY]))).ok).toBe(true);
    expect((await claimCard(opts(m, "p2", ["http://127.0.0.1:11435", "http://127.0.0.1:8190"]))).ok).toBe(true);
  });

  test("the claim ends with its process (kill -9) or its release, and a successor takes it at once", async () => {
    const m = new FakeMachine();
    expect((await claimCard(opts(m, "p1", [OLLAMA, COMFY]))).ok).toBe(true);
    m.kill("p1");
    const successor = await claimCard(opts(m, "p2", [OLLAMA, COMFY]));
    if (!successor.ok) throw new Error(successor.message);
    successor.claim.release();
    expect((await claimCard(opts(m, "p3", [OLLAMA, COMFY]))).ok).toBe(true);
  });

  test("a holder that answers nothing is named as unknown, and still refuses", async () => {
    const m = new FakeMachine();
    expect((await claimCard(opts(m, "p1", [OLLAMA], { socket: m.socket("p1", { silent: true }) }))).ok).toBe(true);
    expect(await claimCard(opts(m, "p2", [OLLAMA]))).toEqual({ ok: false, message: "another gpu-turnstile (pid unknown) already guards http://127.0.0.1:11434" });
  });
});

describe.if(process.platform === "linux")("on this machine's sockets (abstract Unix sockets)", () => {
  test("a second claim on one address is refused, told the holder's line, and free again after release", async () => {
    const upstream = `http://127.0.0.1:${20000 + (process.pid % 20000)}/claim-test`;
    const o: ClaimOptions = { upstreams: [upstream], socket: claimSocket("linux"), system: "linux", tmpdir: "/tmp", pid: process.pid, listening: ["http://127.0.0.1:1"] };
    const first = await claimCard(o);
    if (!first.ok) throw new Error(first.message);
    try {
      first.claim.listening = ["http://127.0.0.1:4321"];
      expect(await claimCard({ ...o, pid: 1 })).toEqual({ ok: false, message: `another gpu-turnstile (pid ${process.pid}, listening on http://127.0.0.1:4321) already guards ${upstream}` });
    } finally {
      first.claim.release();
    }
    const again = await claimCard(o);
    expect(again.ok).toBe(true);
    if (again.ok) again.claim.release();
  });
});

describe.if(process.platform !== "win32")("socket files (systems without abstract sockets)", () => {
  test("a live holder refuses; one killed with -9 leaves a file that the next claim takes over", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gt-claim-"));
    const upstream = "http://127.0.0.1:11434";
    const o: ClaimOptions = { upstreams: [upstream], socket: claimSocket("other"), system: "other", tmpdir: dir, pid: process.pid, listening: [] };
    const holderScript = `
      import { claimCard } from ${JSON.stringify(join(import.meta.dir, "../../src/runtime/card-claim.ts"))};
      import { claimSocket } from ${JSON.stringify(join(import.meta.dir, "../../src/runtime/claim-socket.ts"))};
      const r = await claimCard({ upstreams: [${JSON.stringify(upstream)}], socket: claimSocket("other"), system: "other", tmpdir: ${JSON.stringify(dir)}, pid: process.pid, listening: ["http://127.0.0.1:7"] });
      console.log(r.ok ? "held" : r.message);
      setInterval(() => {}, 1000);
    `;
    const holder = Bun.spawn([process.execPath, "-e", holderScript], { stdout: "pipe", stderr: "inherit" });
    try {
      const reader = holder.stdout.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toBe("held\n");
      expect(await claimCard(o)).toEqual({ ok: false, message: `another gpu-turnstile (pid ${holder.pid}, listening on http://127.0.0.1:7) already guards ${upstream}` });
      holder.kill("SIGKILL");
      await holder.exited;
      const successor = await claimCard(o);
      expect(successor.ok).toBe(true);
      if (successor.ok) successor.claim.release();
    } finally {
      holder.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
