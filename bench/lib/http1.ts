/**
 * A minimal HTTP/1.1 client on raw sockets, for measuring what a client really sees: when the
 * response head arrives and when each body byte arrives. It has none of fetch's per-process
 * request limit (so 1,000 streams can be opened from one process) and none of its buffering.
 * The response parser is pure and incremental (content-length, chunked, or read-until-close).
 */
import { connect, type Socket } from "node:net";
import { now } from "./clock.ts";

export type ParseEvent =
  | { type: "head"; status: number; headers: Map<string, string> }
  | { type: "data"; bytes: Uint8Array }
  | { type: "end" };

const CRLFCRLF = Buffer.from("\r\n\r\n");
const CRLF = Buffer.from("\r\n");

type Mode =
  | { kind: "head" }
  | { kind: "length"; left: number }
  | { kind: "chunk-size" }
  | { kind: "chunk-data"; left: number }
  | { kind: "chunk-crlf" }
  | { kind: "trailers" }
  | { kind: "until-close" };

/** Incremental parser for a sequence of responses on one connection. */
export class ResponseParser {
  private buf: Buffer = Buffer.alloc(0);
  private mode: Mode = { kind: "head" };
  /** Set when the request was HEAD: the response has no body whatever its headers say. */
  headRequest = false;

  feed(bytes: Uint8Array): ParseEvent[] {
    this.buf = this.buf.length === 0 ? Buffer.from(bytes) : Buffer.concat([this.buf, bytes]);
    const out: ParseEvent[] = [];
    for (;;) {
      const m = this.mode;
      if (m.kind === "head") {
        const i = this.buf.indexOf(CRLFCRLF);
        if (i < 0) break;
        const lines = this.buf.subarray(0, i).toString("latin1").split("\r\n");
        this.buf = this.buf.subarray(i + 4);
        const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? NaN);
        const headers = new Map<string, string>();
        for (const l of lines.slice(1)) {
          const c = l.indexOf(":");
          if (c > 0) headers.set(l.slice(0, c).trim().toLowerCase(), l.slice(c + 1).trim());
        }
        out.push({ type: "head", status, headers });
        const te = headers.get("transfer-encoding")?.toLowerCase() ?? "";
        const cl = headers.get("content-length");
        if (this.headRequest || status === 204 || status === 304 || (status >= 100 && status < 200)) {
          out.push({ type: "end" });
          this.mode = { kind: "head" };
        } else if (te.includes("chunked")) this.mode = { kind: "chunk-size" };
        else if (cl !== undefined) {
          const n = Number(cl);
          if (n === 0) {
            out.push({ type: "end" });
            this.mode = { kind: "head" };
          } else this.mode = { kind: "length", left: n };
        } else this.mode = { kind: "until-close" };
      } else if (m.kind === "length") {
        if (this.buf.length === 0) break;
        const take = Math.min(m.left, this.buf.length);
        out.push({ type: "data", bytes: this.buf.subarray(0, take) });
        this.buf = this.buf.subarray(take);
        m.left -= take;
        if (m.left === 0) {
          out.push({ type: "end" });
          this.mode = { kind: "head" };
        }
      } else if (m.kind === "chunk-size") {
        const i = this.buf.indexOf(CRLF);
        if (i < 0) break;
        const size = parseInt(this.buf.subarray(0, i).toString("latin1").split(";")[0]!.trim(), 16);
        this.buf = this.buf.subarray(i + 2);
        if (!Number.isFinite(size)) throw new Error("bad chunk size");
        this.mode = size === 0 ? { kind: "trailers" } : { kind: "chunk-data", left: size };
      } else if (m.kind === "chunk-data") {
        if (this.buf.length === 0) break;
        const take = Math.min(m.left, this.buf.length);
        out.push({ type: "data", bytes: this.buf.subarray(0, take) });
        this.buf = this.buf.subarray(take);
        m.left -= take;
        if (m.left === 0) this.mode = { kind: "chunk-crlf" };
      } else if (m.kind === "chunk-crlf") {
        if (this.buf.length < 2) break;
        this.buf = this.buf.subarray(2);
        this.mode = { kind: "chunk-size" };
      } else if (m.kind === "trailers") {
        const i = this.buf.indexOf(CRLF);
        if (i < 0) break;
        this.buf = this.buf.subarray(i + 2);
        if (i === 0) {
          out.push({ type: "end" });
          this.mode = { kind: "head" };
        }
      } else {
        if (this.buf.length === 0) break;
        out.push({ type: "data", bytes: this.buf });
        this.buf = Buffer.alloc(0);
      }
    }
    return out;
  }

  /** The peer closed: a read-until-close body ends here; anything else was cut short. */
  closed(): ParseEvent[] {
    if (this.mode.kind === "until-close") {
      this.mode = { kind: "head" };
      return [{ type: "end" }];
    }
    return [];
  }
}

export interface RequestSpec {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
}

export function serializeRequest(host: string, r: RequestSpec): Buffer {
  const body = r.body === undefined ? undefined : typeof r.body === "string" ? Buffer.from(r.body) : Buffer.from(r.body);
  const lines = [`${r.method} ${r.path} HTTP/1.1`, `Host: ${host}`];
  for (const [k, v] of Object.entries(r.headers ?? {})) lines.push(`${k}: ${v}`);
  if (body) lines.push(`Content-Length: ${body.length}`);
  const head = Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1");
  return body ? Buffer.concat([head, body]) : head;
}

export interface ExchangeHandlers {
  onHead?(status: number, headers: Map<string, string>, t: number): void;
  onData?(bytes: Uint8Array, t: number): void;
  onEnd?(t: number): void;
  onError?(err: Error, t: number): void;
}

export interface Exchange {
  /** When the request was handed to the socket layer (before connecting). */
  readonly sentAt: number;
  /** Closes the connection at once (a client that goes away). */
  close(): void;
}

/** One request on a fresh connection; the connection is closed once the response has ended. */
export function exchange(url: URL, r: RequestSpec, h: ExchangeHandlers): Exchange {
  const sentAt = now();
  const parser = new ResponseParser();
  parser.headRequest = r.method === "HEAD";
  let done = false;
  const sock: Socket = connect({ host: url.hostname, port: Number(url.port), noDelay: true });
  const finish = (t: number, err?: Error) => {
    if (done) return;
    done = true;
    if (err) h.onError?.(err, t);
    else h.onEnd?.(t);
    sock.destroy();
  };
  const handle = (events: ParseEvent[], t: number) => {
    for (const e of events) {
      if (done) return;
      if (e.type === "head") h.onHead?.(e.status, e.headers, t);
      else if (e.type === "data") h.onData?.(e.bytes, t);
      else finish(t);
    }
  };
  sock.on("connect", () => sock.write(serializeRequest(url.host, r)));
  sock.on("data", (d: Buffer) => {
    const t = now();
    try {
      handle(parser.feed(d), t);
    } catch (err) {
      finish(t, err as Error);
    }
  });
  sock.on("error", (err) => finish(now(), err));
  sock.on("close", () => {
    const t = now();
    handle(parser.closed(), t);
    finish(t, new Error("connection closed before the response ended"));
  });
  return {
    sentAt,
    close() {
      done = true;
      sock.destroy();
    },
  };
}

/** Splits a byte stream into newline-terminated lines, each stamped with its arrival time. */
export class LineSplitter {
  private rest = "";
  private readonly dec = new TextDecoder();
  push(bytes: Uint8Array, t: number, onLine: (line: string, t: number) => void): void {
    const text = this.rest + this.dec.decode(bytes, { stream: true });
    const parts = text.split("\n");
    this.rest = parts.pop() ?? "";
    for (const p of parts) if (p.length > 0) onLine(p, t);
  }
}
