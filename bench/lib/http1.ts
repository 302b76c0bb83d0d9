/**
 * A minimal HTTP/1.1 client on raw sockets, for measuring what a client really sees: when the
 * response head arrives and when each body byte arrives. It has none of fetch's per-process
 * request limit (so 1,000 streams can be opened from one process) and none of its buffering.
 * Responses are read by the turnstile's own incremental reader (src/upstream/h1-response.ts).
 */
import { connect, type Socket } from "node:net";
import { ResponseReader, type ResponseSink } from "../../src/upstream/h1-response.ts";
import { now } from "./clock.ts";

/** Response fields as the bench reads them: lower-case names, the last value of a repeated one. */
export function fieldMap(fields: [string, string][]): Map<string, string> {
  return new Map(fields.map(([k, v]) => [k.toLowerCase(), v]));
}

/** A reader whose callbacks are handed the time the bytes being fed arrived. */
export function timedReader(sink: { head?(status: number, headers: Map<string, string>, t: number): void; data?(bytes: Uint8Array, t: number): void; end?(t: number): void }): { reader: ResponseReader; feed(bytes: Uint8Array, t: number): void; eof(t: number): void } {
  let at = 0;
  const s: ResponseSink = {
    head: (h) => sink.head?.(h.status, fieldMap(h.fields), at),
    data: (b) => sink.data?.(b, at),
    end: () => sink.end?.(at),
  };
  const reader = new ResponseReader(s);
  return {
    reader,
    feed(bytes, t) {
      at = t;
      reader.feed(bytes);
    },
    eof(t) {
      at = t;
      reader.eof();
    },
  };
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
export function exchange(url: URL, req: RequestSpec, h: ExchangeHandlers): Exchange {
  const sentAt = now();
  let done = false;
  const sock: Socket = connect({ host: url.hostname, port: Number(url.port), noDelay: true });
  const finish = (t: number, err?: Error) => {
    if (done) return;
    done = true;
    if (err) h.onError?.(err, t);
    else h.onEnd?.(t);
    sock.destroy();
  };
  const r = timedReader({
    head: (status, headers, t) => done || h.onHead?.(status, headers, t),
    data: (bytes, t) => done || h.onData?.(bytes, t),
    end: (t) => finish(t),
  });
  r.reader.expect(req.method === "HEAD");
  sock.on("connect", () => sock.write(serializeRequest(url.host, req)));
  sock.on("data", (d: Buffer) => {
    const t = now();
    try {
      r.feed(d, t);
    } catch (err) {
      finish(t, err as Error);
    }
  });
  sock.on("error", (err) => finish(now(), err));
  sock.on("close", () => {
    const t = now();
    try {
      r.eof(t);
    } catch (err) {
      finish(t, err as Error);
    }
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
