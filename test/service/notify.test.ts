/**
 * sd_notify over real unix datagram sockets: python3 binds the socket (path and abstract) and
 * prints every datagram it receives, so what we check is what systemd would read.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { notifySockAddr, statusMessage, watchdogIntervalMs } from "../../src/service/notify-address.ts";
import { createNotifier } from "../../src/service/notify.ts";
import { reportStatus } from "../../src/service/notify-status.ts";
import { GpuLock } from "../../src/lock/index.ts";

const python = Bun.which("python3");

const RECEIVER = `
import json, socket, sys
name = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\\0" + name[1:] if name.startswith("@") else name)
s.settimeout(10)
print("BOUND", flush=True)
while True:
    data = s.recv(4096)
    print(json.dumps(data.decode()), flush=True)
`;

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** Starts the receiver; resolves once it is bound. `next()` resolves with each datagram. */
async function receiver(name: string) {
  const proc = Bun.spawn([python!, "-c", RECEIVER, name], { stdout: "pipe", stderr: "pipe" });
  cleanups.push(() => proc.kill());
  const reader = proc.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  const line = async (): Promise<string> => {
    for (;;) {
      const nl = buffered.indexOf("\n");
      if (nl >= 0) {
        const l = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        return l;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error(`receiver ended: ${await new Response(proc.stderr).text()}`);
      buffered += decoder.decode(value, { stream: true });
    }
  };
  expect(await line()).toBe("BOUND");
  return { next: async () => JSON.parse(await line()) as string };
}

describe.skipIf(!python)("createNotifier with a real socket", () => {
  test("path socket: READY, STATUS, WATCHDOG, STOPPING arrive in order", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gt-notify-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, "notify.sock");
    const rx = await receiver(path);
    const n = createNotifier({ NOTIFY_SOCKET: path });
    cleanups.push(() => n.close());
    expect(n.enabled).toBe(true);
    expect(n.ready()).toBe(true);
    expect(n.status("state=idle llm_inflight=0\nsecond line")).toBe(true);
    expect(n.watchdog()).toBe(true);
    expect(n.stopping()).toBe(true);
    expect(await rx.next()).toBe("READY=1");
    expect(await rx.next()).toBe("STATUS=state=idle llm_inflight=0 second line");
    expect(await rx.next()).toBe("WATCHDOG=1");
    expect(await rx.next()).toBe("STOPPING=1");
  });

  test("abstract socket (@name): the address length is exact, or the name would not match", async () => {
    const name = `@gpu-turnstile-test-${process.pid}-${Date.now()}`;
    const rx = await receiver(name);
    const n = createNotifier({ NOTIFY_SOCKET: name });
    cleanups.push(() => n.close());
    expect(n.ready()).toBe(true);
    expect(await rx.next()).toBe("READY=1");
  });

  test("a socket nobody listens on: send fails and says why, without throwing", () => {
    const n = createNotifier({ NOTIFY_SOCKET: `@gpu-turnstile-nobody-${process.pid}-${Date.now()}` });
    cleanups.push(() => n.close());
    expect(n.ready()).toBe(false);
    expect(n.problem).toMatch(/sendto\(\) failed: errno 111/); // ECONNREFUSED
  });

  test("STATUS= follows a waiter joining the queue, on the real beat, with no state change", async () => {
    const name = `@gpu-turnstile-status-${process.pid}-${Date.now()}`;
    const rx = await receiver(name);
    const n = createNotifier({ NOTIFY_SOCKET: name });
    cleanups.push(() => n.close());
    const lock = new GpuLock();
    const chat = await lock.acquireLLM();
    const stop = reportStatus({ snapshot: () => lock.snapshot(), send: (t) => n.status(t) });
    cleanups.push(stop);
    expect(await rx.next()).toBe("STATUS=GPU llm: 1 LLM request(s) running, 0 waiting; 0 image job(s) waiting");
    const image = lock.acquireImage();
    expect(await rx.next()).toBe("STATUS=GPU llm: 1 LLM request(s) running, 0 waiting; 1 image job(s) waiting");
    chat.release();
    (await image).release();
    expect(await rx.next()).toBe("STATUS=GPU idle: 0 LLM request(s) running, 0 waiting; 0 image job(s) waiting");
  });

  test("after close nothing is sent", async () => {
    const name = `@gpu-turnstile-closed-${process.pid}-${Date.now()}`;
    await receiver(name);
    const n = createNotifier({ NOTIFY_SOCKET: name });
    n.close();
    expect(n.ready()).toBe(false);
    n.close(); // twice is fine
  });
});
if (!python) console.warn("note: python3 not found: real-socket sd_notify tests skipped");

describe("createNotifier without a usable NOTIFY_SOCKET", () => {
  test("unset: disabled, every call a no-op", () => {
    const n = createNotifier({});
    expect(n.enabled).toBe(false);
    expect(n.problem).toBeUndefined();
    expect([n.ready(), n.watchdog(), n.stopping(), n.status("x")]).toEqual([false, false, false, false]);
    n.close();
  });

  test("a relative path or vsock address: disabled with a reason", () => {
    expect(createNotifier({ NOTIFY_SOCKET: "run/notify" }).problem).toContain("only absolute paths");
    expect(createNotifier({ NOTIFY_SOCKET: "vsock:2:1234" }).enabled).toBe(false);
  });
});

describe("notifySockAddr", () => {
  test("path: family AF_UNIX, path bytes, NUL counted in the length", () => {
    const a = notifySockAddr("/run/systemd/notify");
    if ("error" in a) throw new Error(a.error);
    expect([a.bytes[0], a.bytes[1]]).toEqual([1, 0]);
    expect(new TextDecoder().decode(a.bytes.slice(2, 2 + 19))).toBe("/run/systemd/notify");
    expect(a.bytes[21]).toBe(0);
    expect(a.length).toBe(2 + 19 + 1);
  });

  test("abstract: leading NUL, no terminator in the length", () => {
    const a = notifySockAddr("@abc");
    if ("error" in a) throw new Error(a.error);
    expect([...a.bytes.slice(0, 6)]).toEqual([1, 0, 0, 97, 98, 99]);
    expect(a.length).toBe(2 + 1 + 3);
  });

  test("too long or empty names are refused", () => {
    expect("error" in notifySockAddr(`/${"x".repeat(106)}`)).toBe(false);
    expect("error" in notifySockAddr(`/${"x".repeat(107)}`)).toBe(true);
    expect("error" in notifySockAddr("@")).toBe(true);
  });
});

describe("watchdogIntervalMs", () => {
  test("half of WATCHDOG_USEC, in ms", () => {
    expect(watchdogIntervalMs({ WATCHDOG_USEC: "30000000" }, 7)).toBe(15000);
  });
  test("off when unset, zero or garbage", () => {
    expect(watchdogIntervalMs({}, 7)).toBeUndefined();
    expect(watchdogIntervalMs({ WATCHDOG_USEC: "0" }, 7)).toBeUndefined();
    expect(watchdogIntervalMs({ WATCHDOG_USEC: "30s" }, 7)).toBeUndefined();
  });
  test("WATCHDOG_PID: only for the process it names", () => {
    expect(watchdogIntervalMs({ WATCHDOG_USEC: "30000000", WATCHDOG_PID: "7" }, 7)).toBe(15000);
    expect(watchdogIntervalMs({ WATCHDOG_USEC: "30000000", WATCHDOG_PID: "8" }, 7)).toBeUndefined();
  });
  test("the notifier carries it", () => {
    const dir = "@gpu-turnstile-wd";
    const n = createNotifier({ NOTIFY_SOCKET: dir, WATCHDOG_USEC: "4000000", WATCHDOG_PID: String(process.pid) });
    expect(n.watchdogIntervalMs).toBe(2000);
    n.close();
  });
});

test("statusMessage keeps a status on one line", () => {
  expect(statusMessage("a\r\nb")).toBe("STATUS=a b");
});
