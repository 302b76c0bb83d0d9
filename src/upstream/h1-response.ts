/**
 * An incremental HTTP/1.1 response reader for one connection (RFC 9112), pure: bytes in,
 * callbacks out, no sockets. The pooled upstream client (h1-pool.ts) feeds it what the socket
 * reads; tests feed it by hand, split at every byte.
 *
 * Message framing follows RFC 9112 §6.3, in its order: a response to HEAD and every 1xx, 204 and
 * 304 has no body; a Transfer-Encoding whose last coding is chunked is decoded; any other
 * Transfer-Encoding, or none and no Content-Length, runs until the connection closes; else
 * Content-Length counts the body. Interim 1xx responses (100 Continue, 103 Early Hints) are read
 * and dropped: the final response is what the client gets.
 */

export interface ResponseHead {
  status: number;
  statusText: string;
  /** Field lines in arrival order, names as sent (Headers lower-cases them). */
  fields: [string, string][];
  /** False when the connection cannot carry another exchange after this one. */
  keepAlive: boolean;
  /** The body's size when known before it is read (0: no body); undefined when chunked or until close. */
  bodyLength: number | undefined;
}

export interface ResponseSink {
  head(h: ResponseHead): void;
  /** A piece of the decoded body; a view of the bytes fed, valid until the next feed. */
  data(bytes: Uint8Array): void;
  end(): void;
}

/** The upstream broke the protocol: the exchange fails and the connection is not reused. */
export class ProtocolError extends Error {
  readonly code = "BAD_UPSTREAM_RESPONSE";
}

/** Heads larger than this are refused (Go's http.Transport default is 1 MiB; ours are tiny). */
export const MAX_HEAD_BYTES = 64 * 1024;
const MAX_CHUNK_LINE = 4096;

const CR = 13;
const LF = 10;
const SP = 32;
const HT = 9;
const SEMICOLON = 59;
const SAW_CR = 1;
const IN_EXTENSION = 2;
const AFTER_DIGITS = 4;

/** The value of an ASCII hex digit, or -1. */
function hexValue(b: number): number {
  if (b >= 48 && b <= 57) return b - 48;
  const l = b | 0x20;
  return l >= 97 && l <= 102 ? l - 87 : -1;
}

type State = "idle" | "head" | "length" | "close" | "chunk-size" | "chunk-data" | "chunk-crlf" | "trailers" | "done";

export class ResponseReader {
  private state: State = "idle";
  /** Bytes of an unfinished head, size line or trailer section. */
  private partial: Uint8Array | null = null;
  private left = 0;
  private noBody = false;
  private keepAlive = true;
  // The chunk-size line being read: hex digits so far, its length, and SAW_CR | IN_EXTENSION | AFTER_DIGITS.
  private sizeDigits = 0;
  private sizeLineLen = 0;
  private sizeFlags = 0;

  constructor(private readonly sink: ResponseSink) {}

  /** Arm the reader for the next response; `head` means the request was HEAD (no body follows). */
  expect(head: boolean): void {
    this.state = "head";
    this.noBody = head;
    this.partial = null;
  }

  /** True while a response is expected or being read. */
  get busy(): boolean {
    return this.state !== "idle" && this.state !== "done";
  }

  /** True when the exchange ended cleanly and the connection may carry another one. */
  get reusable(): boolean {
    return this.state === "done" && this.keepAlive && this.partial === null;
  }

  feed(bytes: Uint8Array): void {
    let at = 0;
    while (at < bytes.length) {
      switch (this.state) {
        case "idle":
        case "done":
          // Bytes nobody asked for: the connection's framing is unknown from here on.
          this.keepAlive = false;
          this.partial = bytes.subarray(at);
          return;
        case "head": {
          const end = this.takeUntilBlankLine(bytes, at);
          if (end < 0) return;
          at = end;
          const block = this.partial!;
          this.partial = null;
          this.onHead(block);
          break;
        }
        case "trailers": {
          // Trailer fields are read and dropped (as fetch does); an empty line ends the message.
          const end = this.takeLine(bytes, at, MAX_HEAD_BYTES, "trailer line");
          if (end < 0) return;
          at = end;
          const empty = this.partial!.length === 2;
          this.partial = null;
          if (empty) this.finish();
          break;
        }
        case "length": {
          const n = Math.min(this.left, bytes.length - at);
          this.sink.data(bytes.subarray(at, at + n));
          at += n;
          this.left -= n;
          if (this.left === 0) this.finish();
          break;
        }
        case "close":
          this.sink.data(at === 0 ? bytes : bytes.subarray(at));
          return;
        case "chunk-size": {
          // Byte by byte, without copies or strings: a streamed answer has one of these lines
          // per piece (an NDJSON token is a chunk of its own).
          const b = bytes[at++]!;
          if (++this.sizeLineLen > MAX_CHUNK_LINE) throw new ProtocolError(`chunk size line longer than ${MAX_CHUNK_LINE} bytes`);
          if (this.sizeFlags & SAW_CR) {
            if (b !== LF || this.sizeDigits === 0) throw new ProtocolError("bad chunk size line");
            this.state = this.left === 0 ? "trailers" : "chunk-data";
          } else if (b === CR) this.sizeFlags |= SAW_CR;
          else if (this.sizeFlags & IN_EXTENSION) {
            // chunk-ext (RFC 9112 §7.1.1): read past, never used.
          } else if (b === SEMICOLON) this.sizeFlags |= IN_EXTENSION;
          else if (b === SP || b === HT) {
            if (this.sizeDigits > 0) this.sizeFlags |= AFTER_DIGITS;
          } else {
            const d = hexValue(b);
            if (d < 0 || this.sizeFlags & AFTER_DIGITS || ++this.sizeDigits > 12) throw new ProtocolError(`bad chunk size (byte 0x${b.toString(16)})`);
            this.left = this.left * 16 + d;
          }
          break;
        }
        case "chunk-data": {
          const n = Math.min(this.left, bytes.length - at);
          this.sink.data(bytes.subarray(at, at + n));
          at += n;
          this.left -= n;
          if (this.left === 0) {
            this.state = "chunk-crlf";
            this.left = 2;
          }
          break;
        }
        case "chunk-crlf": {
          const want = this.left === 2 ? CR : LF;
          if (bytes[at] !== want) throw new ProtocolError("chunk not followed by CRLF");
          at++;
          if (--this.left === 0) this.startChunkSize();
          break;
        }
      }
    }
  }

  /** The connection closed (or half-closed) on the upstream's side. */
  eof(): void {
    if (this.state === "close") return this.finish();
    if (this.state === "idle" || this.state === "done") {
      this.keepAlive = false;
      return;
    }
    const where = this.state === "head" ? (this.partial ? "in the middle of the response head" : "before answering") : "in the middle of the response body";
    throw new ProtocolError(`upstream closed the connection ${where}`);
  }

  private startChunkSize(): void {
    this.state = "chunk-size";
    this.left = 0;
    this.sizeDigits = 0;
    this.sizeLineLen = 0;
    this.sizeFlags = 0;
  }

  private finish(): void {
    this.state = "done";
    this.sink.end();
  }

  private onHead(block: Uint8Array): void {
    const lines = latin1(block, 0, block.length - 4).split("\r\n");
    const m = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: (.*))?$/.exec(lines[0]!);
    if (!m) throw new ProtocolError(`bad status line ${JSON.stringify(lines[0]!.slice(0, 60))}`);
    const minor = m[1]!;
    const status = Number(m[2]);
    const fields: [string, string][] = [];
    let contentLength: number | undefined;
    let transferEncoding: string | undefined;
    let connection = "";
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      // RFC 9112 §5.2: obs-fold and a name with whitespace before the colon are rejected.
      if (colon <= 0 || line.charCodeAt(0) === 32 || line.charCodeAt(0) === 9 || /\s/.test(line[colon - 1]!)) {
        throw new ProtocolError(`bad header line ${JSON.stringify(line.slice(0, 60))}`);
      }
      const name = line.slice(0, colon);
      const value = line.slice(colon + 1).trim();
      const lower = name.toLowerCase();
      if (lower === "content-length") {
        const n = /^\d{1,15}$/.test(value) ? Number(value) : NaN;
        if (Number.isNaN(n) || (contentLength !== undefined && contentLength !== n)) throw new ProtocolError(`bad Content-Length ${JSON.stringify(value)}`);
        contentLength = n;
      } else if (lower === "transfer-encoding") {
        transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
      } else if (lower === "connection") {
        connection += `,${value.toLowerCase()}`;
      }
      fields.push([name, value]);
    }
    if (status < 200) {
      // 101 would hand the connection to another protocol; nothing here asked for one.
      if (status === 101) throw new ProtocolError("unexpected 101 Switching Protocols");
      this.state = "head";
      return;
    }
    const closeRequested = connection.split(",").some((t) => t.trim() === "close");
    this.keepAlive = minor === "1" ? !closeRequested : connection.split(",").some((t) => t.trim() === "keep-alive") && !closeRequested;
    let state: State;
    if (this.noBody || status === 204 || status === 304) state = "done";
    else if (transferEncoding !== undefined) {
      const codings = transferEncoding.toLowerCase().split(",");
      state = codings[codings.length - 1]!.trim() === "chunked" ? "chunk-size" : "close";
    } else if (contentLength !== undefined) state = contentLength === 0 ? "done" : "length";
    else state = "close";
    if (state === "close") this.keepAlive = false;
    this.left = contentLength ?? 0;
    this.state = state;
    if (state === "chunk-size") this.startChunkSize();
    const bodyLength = state === "done" ? 0 : state === "length" ? contentLength : undefined;
    this.sink.head({ status, statusText: m[3] ?? "", fields, keepAlive: this.keepAlive, bodyLength });
    if (state === "done") this.sink.end();
  }

  /** Collects bytes up to and including CRLFCRLF into `partial`; returns the index after it, or -1. */
  private takeUntilBlankLine(bytes: Uint8Array, at: number): number {
    return this.take(bytes, at, BLANK_LINE, MAX_HEAD_BYTES, "response head");
  }

  /** Collects one CRLF-terminated line into `partial`; returns the index after it, or -1. */
  private takeLine(bytes: Uint8Array, at: number, max: number, what: string): number {
    return this.take(bytes, at, CRLF, max, what);
  }

  private take(bytes: Uint8Array, at: number, terminator: Buffer, max: number, what: string): number {
    if (this.partial === null) {
      // The usual case: the whole line or head is in this read; no copy.
      const i = view(bytes).indexOf(terminator, at);
      if (i >= 0) {
        this.partial = bytes.subarray(at, i + terminator.length);
        return i + terminator.length;
      }
      if (bytes.length - at > max) throw new ProtocolError(`${what} longer than ${max} bytes`);
      this.partial = bytes.slice(at);
      return -1;
    }
    const before = this.partial.length;
    const joined = new Uint8Array(before + bytes.length - at);
    joined.set(this.partial);
    joined.set(bytes.subarray(at), before);
    // The terminator may straddle the two reads: search from just before the join.
    const i = view(joined).indexOf(terminator, Math.max(0, before - terminator.length + 1));
    if (i >= 0) {
      this.partial = joined.subarray(0, i + terminator.length);
      return at + (i + terminator.length - before);
    }
    if (joined.length > max) throw new ProtocolError(`${what} longer than ${max} bytes`);
    this.partial = joined;
    return -1;
  }
}

const BLANK_LINE = Buffer.from("\r\n\r\n");
const CRLF = Buffer.from("\r\n");

function view(b: Uint8Array): Buffer {
  return Buffer.from(b.buffer, b.byteOffset, b.length);
}

function latin1(b: Uint8Array, from: number, to: number): string {
  return Buffer.from(b.buffer, b.byteOffset + from, Math.max(0, to - from)).toString("latin1");
}
