/**
 * Differential test: the same response bytes read by our ResponseReader and by Node's llhttp
 * (node:http's client in a real `node` process: Bun's node:http is not llhttp). Valid framings
 * must give the same status, fields and body; the malformed ones listed must be refused by both.
 *
 * Where we deliberately differ (so these are not listed): BWS before a chunk extension's ";"
 * (allowed, RFC 9112 §7.1.1), OWS after a Content-Length value (RFC 9110 §5.5), two identical
 * Content-Lengths (RFC 9110 §8.6) — llhttp refuses all three; OWS after "chunked", which llhttp
 * takes for another coding (so reads until close); Content-Length beside chunked is read
 * as chunked (RFC 9112 §6.3; Bun re-frames what it hands on); `chunked, chunked` and any coding but
 * chunked are refused (RFC 9112 §6.1, §7), which llhttp reads.
 */
import { describe, expect, test } from "bun:test";
import { ResponseReader, type ResponseHead } from "../../src/upstream/h1-response.ts";
import { mulberry32 } from "../support/prng.ts";

const NODE = Bun.which("node");
/** The cases below were checked against Node 20's llhttp (9.x); older ones were more lenient. */
const NODE_MAJOR = NODE ? Number(/^v(\d+)/.exec(Bun.spawnSync([NODE, "--version"]).stdout.toString())?.[1] ?? 0) : 0;

/** Answers each GET with the next case's bytes, then ends the connection; prints llhttp's reading. */
const LLHTTP = `
const net = require("node:net"), http = require("node:http");
const cases = JSON.parse(require("node:fs").readFileSync(0, "utf8")).map((b) => Buffer.from(b, "base64"));
let current;
const server = net.createServer((s) => { s.once("data", () => s.end(current)); s.on("error", () => {}); });
server.listen(0, "127.0.0.1", async () => {
  const out = [];
  for (const c of cases) {
    current = c;
    out.push(await new Promise((resolve) => {
      const req = http.get({ host: "127.0.0.1", port: server.address().port, path: "/", agent: false }, (res) => {
        const parts = [];
        res.on("data", (d) => parts.push(d));
        res.on("end", () => {
          const headers = [];
          for (let i = 0; i < res.rawHeaders.length; i += 2) headers.push([res.rawHeaders[i], res.rawHeaders[i + 1]]);
          resolve({ ok: true, status: res.statusCode, headers, body: Buffer.concat(parts).toString("latin1") });
        });
        res.on("error", (e) => resolve({ ok: false, error: e.code || e.message }));
        res.on("aborted", () => resolve({ ok: false, error: "aborted" }));
      });
      req.on("error", (e) => resolve({ ok: false, error: e.code || e.message }));
    }));
  }
  process.stdout.write(JSON.stringify(out));
  server.close();
});`;

interface Verdict {
  ok: boolean;
  status?: number;
  headers?: [string, string][];
  body?: string;
  error?: string;
}

function llhttp(wires: Buffer[]): Verdict[] {
  const proc = Bun.spawnSync([NODE!, "-e", LLHTTP], { stdin: Buffer.from(JSON.stringify(wires.map((w) => w.toString("base64")))), timeout: 20_000 });
  if (proc.exitCode !== 0) throw new Error(`node failed: ${proc.stderr.toString()}`);
  return JSON.parse(proc.stdout.toString()) as Verdict[];
}

/** Ours, read the way the pool reads it: fed as it came, then the upstream's end of the connection. */
function ours(wire: Buffer): Verdict {
  let head: ResponseHead | undefined;
  let body = "";
  const r = new ResponseReader({ head: (h) => (head = h), data: (b) => (body += Buffer.from(b).toString("latin1")), end: () => {} });
  r.expect(false);
  try {
    r.feed(wire);
    r.eof();
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
  return { ok: true, status: head!.status, headers: head!.fields, body };
}

/** A case's bytes: its text as UTF-8, so "à" is the two bytes a real upstream sends. */
const wire = (s: string) => Buffer.from(s, "utf8");

const AGREED_VALID = [
  "HTTP/1.1 200 OK\r\nX-Title: voilà\r\nX-Pad: \t\u00a0x\u00a0 \r\nContent-Length: 2\r\n\r\nok",
  `HTTP/1.1 200 OK\r\nContent-Length: ${"0".repeat(25)}5\r\n\r\nhello`,
  `HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${"0".repeat(25)}5\r\nhello\r\n${"0".repeat(25)}\r\n\r\n`,
  'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a="b c";d\r\nhello\r\n0\r\nX-T: 1\r\n\r\n',
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: , Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
  "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
  "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 \r\nX-Empty:\r\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
];

const AGREED_INVALID = [
  "HTTP/1.1 200 OK\r\nContent-Length: 5\v\r\n\r\nhello",
  "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nContent-Length: 9007199254740993\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nhello\r\n0\r\n\r\n",
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\n0\r\n\r\n",
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000\r\nok\r\n0\r\n\r\n",
  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: a\nb\r\n\r\n",
  "HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nX-A: 1\rX\r\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nX-A: a\u0000b\r\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nX-A: a\u000bb\r\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nXé: 1\r\nContent-Length: 2\r\n\r\nok",
  "HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 2\r\n\r\nok",
];

/** Valid responses with random fields, whitespace, leading zeros, chunkings and extensions. */
function generated(seed: number, n: number): Buffer[] {
  const rnd = mulberry32(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const ows = () => pick(["", " ", "\t", "  ", " \t"]);
  const zeros = () => "0".repeat(pick([0, 0, 1, 3, 17]));
  const out: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    const body = wire(Array.from({ length: Math.floor(rnd() * 40) }, () => pick(["a", "é", "{", "\n", "\r", "0", " ", "\u00a0"])).join(""));
    let head = `HTTP/1.${pick(["1", "1", "0"])} ${pick([200, 201, 404, 500, 503])}${pick(["", " ", " OK", " Not Found Here"])}\r\n`;
    for (let f = Math.floor(rnd() * 4); f > 0; f--) head += `${pick(["X-Title", "Content-Type", "x-a", "Vary"])}:${ows()}${pick(["voilà", "application/json", "a b", "\u00a0nbsp\u00a0", "", "1"])}${ows()}\r\n`;
    const framing = pick(["length", "chunked", "close"]);
    // Whitespace after a Content-Length or "chunked" is allowed (RFC 9110 §5.5) but llhttp refuses
    // the one and reads the other as some other coding: none is sent.
    if (framing === "length") out.push(Buffer.concat([wire(`${head}Content-Length:${ows()}${zeros()}${body.length}\r\n\r\n`), body]));
    else if (framing === "close") out.push(Buffer.concat([wire(`${head}\r\n`), body]));
    else {
      // Chunks cut at byte offsets (a UTF-8 char may straddle two), sizes in either case of hex.
      const parts = [wire(`${head}Transfer-Encoding:${ows()}chunked\r\n\r\n`)];
      for (let at = 0; at < body.length; ) {
        const len = Math.min(body.length - at, 1 + Math.floor(rnd() * 12));
        const size = len.toString(16);
        parts.push(wire(`${zeros()}${rnd() < 0.5 ? size : size.toUpperCase()}${pick(["", ";x", ";x=1", ';x="a b"'])}\r\n`), body.subarray(at, at + len), wire("\r\n"));
        at += len;
      }
      parts.push(wire(`${zeros()}0\r\n${pick(["", "X-Trailer: t\r\n"])}\r\n`));
      out.push(Buffer.concat(parts));
    }
  }
  return out;
}

describe.skipIf(NODE_MAJOR < 20)("ResponseReader agrees with Node's llhttp", () => {
  test("on valid framings (hand-picked and 150 generated) and on malformed ones", () => {
    const valid = [...AGREED_VALID.map(wire), ...generated(20261203, 150)];
    const invalid = AGREED_INVALID.map(wire);
    const theirs = llhttp([...valid, ...invalid]);
    valid.forEach((w, i) => {
      const at = `case ${JSON.stringify(w.toString("latin1"))}`;
      expect({ at, v: ours(w) }).toEqual({ at, v: theirs[i]! });
    });
    invalid.forEach((w, i) => {
      const at = `case ${JSON.stringify(w.toString("latin1"))}`;
      expect({ at, ours: ours(w).ok, llhttp: theirs[valid.length + i]!.ok }).toEqual({ at, ours: false, llhttp: false });
    });
  });
});
