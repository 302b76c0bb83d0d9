/**
 * The pure steps of one proxied `GET /api/tags`, timed in isolation (no sockets, so the figures
 * repeat on a busy machine where CPU per request from /proc moves ±20 %): the front door, the
 * upstream head, parsing the upstream's answer, and building the Response handed to Bun.
 * Run: `npx bun bench/experiments/hot-path.ts`. Medians of 7 rounds, µs per call.
 */
import { admit } from "../../src/proxy/front-door.ts";
import { upstreamRequestHead } from "../../src/upstream/headers.ts";
import { ResponseReader, type ResponseHead } from "../../src/upstream/h1-response.ts";

const upstream = new URL("http://127.0.0.1:11434");
// What wrk sends, as Bun hands it over.
const req = new Request("http://127.0.0.1:8080/api/tags", { headers: { host: "127.0.0.1:8080" } });
const body = "x".repeat(1457);
const answer = Buffer.from(
  `HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nDate: Thu, 03 Dec 2026 14:44:59 GMT\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
  "latin1",
);

let sink = 0;
let head: ResponseHead | undefined;
const reader = new ResponseReader({
  head: (h) => (head = h),
  data: (b) => (sink += b.length),
  end: () => sink++,
});

const steps: [string, () => void][] = [
  ["front door (admit)", () => void (sink += admit(req, () => true).ok ? 1 : 0)],
  ["upstream request head", () => void (sink += upstreamRequestHead(req.headers, upstream, { clientIp: "127.0.0.1", proto: "http" }).lines.length)],
  ["response parse (head and 1,457-byte body)", () => {
    reader.expect(false);
    reader.feed(answer);
  }],
  ["Response from the parsed head", () => {
    const h = head!;
    sink += new Response(answer.subarray(answer.length - body.length), { status: h.status, statusText: h.statusText, headers: h.fields }).status;
  }],
];

function round(fn: () => void, n: number): number {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) fn();
  return ((performance.now() - t0) * 1000) / n;
}

for (const [name, fn] of steps) {
  round(fn, 50_000);
  const runs = Array.from({ length: 7 }, () => round(fn, 100_000)).sort((a, b) => a - b);
  console.log(`${name.padEnd(44)} median ${runs[3]!.toFixed(3)} µs (min ${runs[0]!.toFixed(3)}, max ${runs[6]!.toFixed(3)})`);
}
if (sink === 42) console.log("");
