/**
 * The upstream hop's HTTP/1.1 client, end to end: a raw-socket "Ollama" writes exact response
 * bytes, the turnstile sits in front, and a raw-socket client reads exactly what came back. The
 * cases are where a parser that follows RFC 9110/9112 (Node's llhttp) and ours used to disagree.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { Socket, TCPSocketListener } from "bun";
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../support/dead-port.ts";
import { nonJsonLines, startMain } from "../../support/main-process.ts";
import { startTestTurnstile, type TestTurnstile, until } from "../../support/turnstile.ts";

interface Conn {
  got: string;
  /** Requests on this connection are met with a cut, as by an upstream that restarted. */
  dead: boolean;
}

/** What the upstream writes for a path (a string is latin1: one char per byte). */
const answers = new Map<string, string | Buffer>();
/** The last request head for a path, as the upstream received it (latin1: one char per byte). */
const requests = new Map<string, string>();
const DEFAULT = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"version\":\"0.12.0\"}";
let upstream: TCPSocketListener<Conn>;
let t: TestTurnstile;
let opened = 0;
let closed = 0;
const sockets = new Set<Socket<Conn>>();
/** While `holdRequests`, answers wait here until the test writes them. */
let held: (() => void)[] = [];
let holdRequests = false;

beforeAll(async () => {
  upstream = Bun.listen<Conn>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        opened++;
        s.data = { got: "", dead: false };
        sockets.add(s);
      },
      data(s, d) {
        s.data.got += Buffer.from(d).toString("latin1");
        for (;;) {
          const end = s.data.got.indexOf("\r\n\r\n");
          if (end < 0) return;
          const head = s.data.got.slice(0, end);
          s.data.got = s.data.got.slice(end + 4);
          if (s.data.dead) return void s.terminate();
          const path = head.split(" ")[1]!;
          requests.set(path, head);
          const answer = answers.get(path) ?? DEFAULT;
          const write = () => s.write(typeof answer === "string" ? Buffer.from(answer, "latin1") : answer);
          if (holdRequests) held.push(write);
          else write();
        }
      },
      close(s) {
        closed++;
        sockets.delete(s);
      },
    },
  });
  t = startTestTurnstile({ OLLAMA_URL: `http://127.0.0.1:${upstream.port}` });
  await t.probed;
});

afterAll(async () => {
  await t.close();
  upstream.stop(true);
});

beforeEach(() => {
  answers.clear();
  holdRequests = false;
  held = [];
});

interface Raw {
  head: string;
  /** Everything after the head, as received (still chunked if the turnstile chunked it). */
  rest: Buffer;
  /** False when the connection was still open at the deadline. */
  closed: boolean;
}

/** One request on its own connection (Connection: close); every byte that comes back. */
function rawGet(path: string, extraHead = "", deadlineMs = 3000): Promise<Raw> {
  const { hostname, port } = new URL(t.ollamaUrl);
  return new Promise((resolve) => {
    const s = connect(Number(port), hostname);
    const parts: Buffer[] = [];
    const done = (closed: boolean) => {
      clearTimeout(timer);
      s.destroy();
      const all = Buffer.concat(parts);
      const end = all.indexOf("\r\n\r\n");
      resolve({ head: all.subarray(0, end < 0 ? all.length : end).toString("latin1"), rest: end < 0 ? Buffer.alloc(0) : all.subarray(end + 4), closed });
    };
    const timer = setTimeout(() => done(false), deadlineMs);
    s.on("data", (d: Buffer) => parts.push(d));
    s.on("close", () => done(true));
    // A cut (RST) is one of the answers under test: it ends the exchange like a close.
    s.on("error", () => done(true));
    s.write(Buffer.from(`GET ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nConnection: close\r\n${extraHead}\r\n`, "latin1"));
  });
}

function statusOf(r: Raw): number {
  return Number(r.head.slice(9, 12));
}

/** The 502 body (Ollama's dialect: {"error": "..."}). */
function errorOf(r: Raw): string {
  return (JSON.parse(r.rest.toString("utf8")) as { error: string }).error;
}

function utf8(s: string): string {
  return Buffer.from(s, "utf8").toString("latin1");
}

describe("field values", () => {
  test("a UTF-8 value reaches the client byte for byte (only SP and HTAB are trimmed), and the upstream too", async () => {
    // "voilà" ends in 0xC3 0xA0; JavaScript's trim() took 0xA0 for a no-break space.
    answers.set("/api/tags", `HTTP/1.1 200 OK\r\nX-Title: ${utf8("voilà")}\r\nX-Pad: \t${utf8("\u00a0ok\u00a0")} \r\nContent-Length: 2\r\n\r\nok`);
    const r = await rawGet("/api/tags", `X-Title: ${utf8("déjà vu")}\r\n`);
    expect(requests.get("/api/tags")!.split("\r\n")).toContain(`x-title: ${utf8("déjà vu")}`);
    expect(statusOf(r)).toBe(200);
    const lines = r.head.split("\r\n").map((l) => l.replace(/^[^:]*/, (name) => name.toLowerCase()));
    expect(lines).toContain(`x-title: ${utf8("voilà")}`);
    expect(lines).toContain(`x-pad: ${utf8("\u00a0ok\u00a0")}`);
    expect(r.rest.toString()).toBe("ok");
  });

  test("a Content-Length with a vertical tab after it is refused with a 502", async () => {
    answers.set("/api/tags", "HTTP/1.1 200 OK\r\nContent-Length: 5\v\r\n\r\nhello");
    const r = await rawGet("/api/tags");
    expect(statusOf(r)).toBe(502);
    expect(errorOf(r)).toContain("Content-Length: 5");
  });
});

describe("transfer codings", () => {
  test.each(["gzip", "gzip, chunked"])("Transfer-Encoding: %s gets a 502 naming gzip, not encoded bytes as a plain body", async (te) => {
    const gz = Buffer.from(Bun.gzipSync("hello"));
    const body = te === "gzip" ? gz : Buffer.concat([Buffer.from(`${gz.length.toString(16)}\r\n`), gz, Buffer.from("\r\n0\r\n\r\n")]);
    answers.set("/api/tags", Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nTransfer-Encoding: ${te}\r\n${te === "gzip" ? "Connection: close\r\n" : ""}\r\n`), body]));
    const r = await rawGet("/api/tags");
    expect(statusOf(r)).toBe(502);
    expect(errorOf(r)).toContain("transfer coding gzip");
  });
});

describe("chunked framing", () => {
  test("a bare LF in a chunk extension cuts the answer; its data is not swallowed into another chunk", async () => {
    const before = closed;
    // With the LF taken as part of the extension, "hello" vanished and the last-chunk became data.
    answers.set("/api/tags", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nhello\r\n0\r\n\r\n");
    // The client's connection is dropped by Bun's request timeout (no error is printed that way),
    // which fires on Bun's timer tick: within a few seconds.
    const r = await rawGet("/api/tags", "", 10_000);
    expect(r.closed).toBe(true);
    // The head may have gone out; the body never ends cleanly and never carries the wrong bytes.
    expect(r.rest.toString("latin1")).not.toContain("0\r\n\r\n");
    // The upstream connection is not kept: its framing is lost.
    await until(() => closed > before, "upstream connection closed");
  });

  test("chunk sizes and a Content-Length with many leading zeros are read; an overflow is refused", async () => {
    answers.set("/api/a", `HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${"0".repeat(20)}2\r\nok\r\n${"0".repeat(20)}\r\n\r\n`);
    answers.set("/api/b", `HTTP/1.1 200 OK\r\nContent-Length: ${"0".repeat(20)}2\r\n\r\nok`);
    answers.set("/api/c", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nok");
    const a = await rawGet("/api/a");
    expect(statusOf(a)).toBe(200);
    expect(a.rest.toString()).toContain("ok");
    expect(a.rest.toString()).toEndWith("0\r\n\r\n");
    const b = await rawGet("/api/b");
    expect(statusOf(b)).toBe(200);
    expect(b.rest.toString()).toBe("ok");
    const c = await rawGet("/api/c");
    expect(statusOf(c)).toBe(502);
    expect(errorOf(c)).toContain("bad Content-Length");
  });
});

describe("connection reuse", () => {
  test("an HTTP/1.0 answer with Transfer-Encoding is read, then its connection is closed, not reused", async () => {
    answers.set("/api/old", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n");
    answers.set("/api/new", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew");
    const a = await rawGet("/api/old");
    expect(statusOf(a)).toBe(200);
    expect(a.rest.toString()).toContain("ok");
    const before = opened;
    const b = await rawGet("/api/new");
    expect(b.rest.toString()).toBe("new");
    expect(opened).toBe(before + 1);
  });

  test("bytes after an answer in the same read keep its connection from being reused", async () => {
    answers.set("/api/extra", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray");
    const a = await rawGet("/api/extra");
    expect(a.rest.toString()).toBe("ok");
    const before = opened;
    const b = await rawGet("/api/tags");
    expect(statusOf(b)).toBe(200);
    expect(opened).toBe(before + 1);
  });

  test("with two idle connections dead after an upstream restart, the retry opens a fresh one", async () => {
    // Two requests at once leave two kept-alive connections idle in the pool.
    holdRequests = true;
    const both = Promise.all([rawGet("/api/tags"), rawGet("/api/tags")]);
    await until(() => held.length === 2, "two requests held upstream");
    holdRequests = false;
    for (const w of held) w();
    for (const r of await both) expect(statusOf(r)).toBe(200);
    // The upstream restarts: every connection it had is gone, though the pool has not seen it yet.
    for (const s of sockets) s.data.dead = true;
    const before = opened;
    const r = await rawGet("/api/tags");
    expect(statusOf(r)).toBe(200);
    expect(opened).toBe(before + 1);
  });
});

test("LOG_FORMAT=json: an upstream that breaks its framing leaves only JSON lines on stderr, no Bun stack dump", async () => {
  const cwd = mkdtempSync(join(tmpdir(), "turnstile-json-"));
  const main = await startMain(cwd, { OLLAMA_URL: `http://127.0.0.1:${upstream.port}`, LISTEN_OLLAMA: `127.0.0.1:${freePort()}`, LOG_FORMAT: "json", LOGLEVEL: "info" });
  const port = Number(new URL(main.url("ollama")).port);
  try {
    answers.set("/api/broken", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nhello\r\n0\r\n\r\n");
    const got = await fetch(`http://127.0.0.1:${port}/api/broken`).then(
      (r) => r.text(),
      () => "cut",
    ).catch(() => "cut");
    expect(got).toBe("cut");
    await until(() => main.stderr().includes("bad byte"), "the cut logged", 10_000);
  } finally {
    await main.kill("SIGTERM");
    rmSync(cwd, { recursive: true, force: true });
  }
  expect(main.stderr().split("\n").filter((l) => l.trim() !== "").length).toBeGreaterThan(3);
  expect(nonJsonLines(main.stderr())).toEqual([]);
}, 30_000);
