/**
 * Proxy variants for bench/experiments/run.ts, each a step from the bare Bun proxy towards what
 * the turnstile does, so the cost of each step can be measured under the same load:
 *   bare     Bun.serve → fetch → return the upstream Response as it is
 *   rewrap   + new Response(body, {status, headers}) with hop-by-hop headers stripped both ways
 *            and X-Forwarded-* set (src/proxy/headers.ts, as the turnstile does)
 *   hono     + a Hono app in front (app.all("*")), as the turnstile's listener does
 *   wrapped  + the response body piped through a pull-based JS ReadableStream (onBodyDone)
 *   lean     the turnstile's pass-through semantics (hop-by-hop stripped both ways, Host and
 *            X-Forwarded-* set) with fewer allocations: no Hono on the proxy path, the URL cut
 *            as a string, headers edited in place, the upstream Response returned as it is
 *   socket   Bun.serve, but the upstream hop on pooled Bun.connect sockets instead of fetch
 *            (experiment quality: no backpressure, no retries; small bodies with a
 *            Content-Length are collected, everything else streams)
 * Env: VARIANT, PORT, UPSTREAM.
 */
import { Hono } from "hono";
import { onBodyDone } from "../../src/proxy/forward.ts";
import { clientResponseHeaders, upstreamRequestHeaders } from "../../src/proxy/headers.ts";
import { ResponseParser, type ParseEvent } from "../lib/http1.ts";

type BunInit = RequestInit & { decompress: boolean; duplex: "half" };

const variant = process.env.VARIANT ?? "bare";
const upstream = new URL(process.env.UPSTREAM!);
const port = Number(process.env.PORT);

async function bare(req: Request): Promise<Response> {
  const url = new URL(req.url);
  const headers = new Headers(req.headers);
  headers.set("host", upstream.host);
  const init: BunInit = { method: req.method, headers, body: req.body, redirect: "manual", decompress: false, signal: req.signal, duplex: "half" };
  return fetch(`${upstream.origin}${url.pathname}${url.search}`, init);
}

async function rewrap(req: Request, clientIp?: string, wrapBody = false): Promise<Response> {
  const url = new URL(req.url);
  const headers = upstreamRequestHeaders(req.headers, upstream, { clientIp, proto: "http" });
  const init: BunInit = { method: req.method, headers, body: req.body, redirect: "manual", decompress: false, signal: req.signal, duplex: "half" };
  const res = await fetch(`${upstream.origin}${url.pathname}${url.search}`, init);
  const body = wrapBody ? onBodyDone(res.body, () => {}) : res.body;
  return new Response(body, { status: res.status, statusText: res.statusText, headers: clientResponseHeaders(res.headers) });
}

/** One keep-alive upstream connection; `onEvents` is the current exchange's sink. */
interface Conn {
  socket: import("bun").Socket<undefined>;
  parser: ResponseParser;
  onEvents?: (events: ParseEvent[]) => void;
  dead: boolean;
}

const idle: Conn[] = [];

async function connectUpstream(): Promise<Conn> {
  const conn = { parser: new ResponseParser(), dead: false } as Conn;
  conn.socket = await Bun.connect({
    hostname: upstream.hostname,
    port: Number(upstream.port),
    socket: {
      data(_s, d) {
        conn.onEvents?.(conn.parser.feed(d));
      },
      close() {
        conn.dead = true;
        conn.onEvents?.([...conn.parser.closed(), { type: "end" }]);
      },
      error() {
        conn.dead = true;
      },
    },
  });
  conn.socket.setNoDelay(true);
  return conn;
}

async function socketProxy(req: Request, clientIp?: string): Promise<Response> {
  const url = new URL(req.url);
  const headers = upstreamRequestHeaders(req.headers, upstream, { clientIp, proto: "http" });
  const body = req.body ? new Uint8Array(await req.arrayBuffer()) : undefined;
  let head = `${req.method} ${url.pathname}${url.search} HTTP/1.1\r\n`;
  headers.forEach((v, k) => (head += `${k}: ${v}\r\n`));
  if (body) head += `content-length: ${body.length}\r\n`;
  head += "\r\n";
  let conn = idle.pop();
  while (conn?.dead) conn = idle.pop();
  conn ??= await connectUpstream();
  const c = conn;
  c.parser.headRequest = req.method === "HEAD";
  return new Promise<Response>((resolve, reject) => {
    let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
    let status = 0;
    let outHeaders: Headers | undefined;
    let collect: Uint8Array[] | undefined;
    c.onEvents = (events) => {
      for (const e of events) {
        if (e.type === "head") {
          status = e.status;
          outHeaders = clientResponseHeaders(new Headers([...e.headers]));
          const len = Number(e.headers.get("content-length") ?? NaN);
          if (Number.isFinite(len) && len <= 65536) collect = [];
          else {
            const stream = new ReadableStream<Uint8Array>({
              start(ctl) {
                controller = ctl;
              },
              cancel() {
                c.socket.end();
              },
            });
            resolve(new Response(stream, { status, headers: outHeaders }));
          }
        } else if (e.type === "data") {
          if (collect) collect.push(e.bytes.slice());
          else controller?.enqueue(e.bytes.slice());
        } else {
          c.onEvents = undefined;
          if (!c.dead) idle.push(c);
          if (collect) resolve(new Response(Buffer.concat(collect), { status, headers: outHeaders }));
          else if (controller) controller.close();
          else reject(new Error("upstream closed"));
          return;
        }
      }
    };
    c.socket.write(head);
    if (body) c.socket.write(body);
  });
}

const HOP = ["connection", "proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"];

/** Strip hop-by-hop fields in place, touching the Headers only when one is there. */
function stripInPlace(h: Headers): void {
  const named = h.get("connection");
  if (named) for (const n of named.split(",")) if (n.trim()) h.delete(n.trim());
  for (const n of HOP) if (h.has(n)) h.delete(n);
}

async function lean(req: Request, clientIp: string | undefined): Promise<Response> {
  const raw = req.url;
  const pathAndQuery = raw.slice(raw.indexOf("/", raw.indexOf("//") + 2));
  const h = req.headers;
  const clientHost = h.get("host");
  stripInPlace(h);
  h.set("host", upstream.host);
  if (clientIp) {
    const prior = h.get("x-forwarded-for");
    h.set("x-forwarded-for", prior ? `${prior}, ${clientIp}` : clientIp);
  }
  if (!h.has("x-forwarded-proto")) h.set("x-forwarded-proto", "http");
  if (clientHost && !h.has("x-forwarded-host")) h.set("x-forwarded-host", clientHost);
  const init: BunInit = { method: req.method, headers: h, body: req.body, redirect: "manual", decompress: false, signal: req.signal, duplex: "half" };
  const res = await fetch(`${upstream.origin}${pathAndQuery}`, init);
  stripInPlace(res.headers);
  return res;
}

const app = new Hono<{ Bindings: { clientIp: string | undefined } }>();
app.all("*", (c) => rewrap(c.req.raw, c.env.clientIp, variant === "wrapped"));

Bun.serve({
  hostname: "127.0.0.1",
  port,
  idleTimeout: 0,
  fetch(req, server) {
    if (variant === "bare") return bare(req);
    const clientIp = server.requestIP(req)?.address;
    if (variant === "rewrap") return rewrap(req, clientIp);
    if (variant === "socket") return socketProxy(req, clientIp);
    if (variant === "lean") return lean(req, clientIp);
    return app.fetch(req, { clientIp });
  },
});
