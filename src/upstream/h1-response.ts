/**
 * An incremental HTTP/1.1 response reader for one connection (RFC 9112), pure: bytes in,
 * callbacks out, no sockets. The pooled upstream client (h1-pool.ts) feeds it what the socket
 * reads; tests feed it by hand, split at every byte.
 *
 * Message framing follows RFC 9112 §6.3, in its order: a response to HEAD and every 1xx, 204 and
 * 304 has no body; a Transfer-Encoding of just `chunked` is decoded, and any other coding is
 * refused (§6.1: a proxy drops Transfer-Encoding as hop-by-hop, so it could only hand on bytes its
 * client cannot decode); else Content-Length counts the body; with neither, it runs until the
 * connection closes. Interim 1xx responses (100 Continue, 103 Early Hints) are read and dropped:
 * the final response is what the client gets.
 */
import { isHopByHop } from "./headers.ts";

export interface ResponseHead {
  status: number;
  statusText: string;
  /** Field lines in arrival order, names as sent (Headers lower-cases them). */
  fields: [string, string][];
  /** True when a field is hop-by-hop (RFC 9110 §7.6.1; a Connection field makes it so): false lets the pool hand `fields` on unfiltered. */
  hopByHop: boolean;
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
const DEL = 127;
const SEMICOLON = 59;
const SAW_CR = 1;
const IN_EXTENSION = 2;
const AFTER_DIGITS = 4;
/** The largest chunk size that can take one more hex digit and stay below 2^48 (exact in a double). */
const MAX_SIZE_BEFORE_DIGIT = 2 ** 44 - 1;

/** The value of an ASCII hex digit, or -1. */
function hexValue(b: number): number {
  if (b >= 48 && b <= 57) return b - 48;
  const l = b | 0x20;
  return l >= 97 && l <= 102 ? l - 87 : -1;
}

type State = "idle" | "head" | "length" | "close" | "chunk-size" | "chunk-data" | "chunk-crlf" | "trailers" | "done";

export class ResponseReader {
  private state: State = "idle";
  /**
   * Bytes of an unfinished head or trailer line, kept across reads in a buffer that grows by
   * doubling: each byte is copied once, so a head that trickles in byte by byte costs linear time.
   */
  private held: Uint8Array = NOTHING;
  private heldLen = 0;
  /** The head or line `take` completed: a view of the bytes fed, or of `held`. */
  private taken: Uint8Array = NOTHING;
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
    this.release();
  }

  /** True while a response is expected or being read. */
  get busy(): boolean {
    return this.state !== "idle" && this.state !== "done";
  }

  /** True when the exchange ended cleanly and the connection may carry another one. */
  get reusable(): boolean {
    return this.state === "done" && this.keepAlive;
  }

  feed(bytes: Uint8Array): void {
    let at = 0;
    while (at < bytes.length) {
      switch (this.state) {
        case "idle":
        case "done":
          // Bytes nobody asked for: the connection's framing is unknown from here on.
          this.keepAlive = false;
          return;
        case "head": {
          const end = this.takeUntilBlankLine(bytes, at);
          if (end < 0) return;
          at = end;
          this.onHead(this.taken, at < bytes.length);
          break;
        }
        case "trailers": {
          // Trailer fields are read and dropped (as fetch does); an empty line ends the message.
          const end = this.takeLine(bytes, at, MAX_HEAD_BYTES, "trailer line");
          if (end < 0) return;
          at = end;
          const line = this.taken;
          if (line.length === 2) this.finish(at < bytes.length);
          else if (view(line).indexOf(LF) < line.length - 1 || view(line).indexOf(CR) < line.length - 2) throw new ProtocolError("bare CR or LF in a trailer line");
          break;
        }
        case "length": {
          const n = Math.min(this.left, bytes.length - at);
          this.sink.data(bytes.subarray(at, at + n));
          at += n;
          this.left -= n;
          if (this.left === 0) this.finish(at < bytes.length);
          break;
        }
        case "close":
          this.sink.data(at === 0 ? bytes : bytes.subarray(at));
          return;
        case "chunk-size": {
          // Byte by byte, without copies or strings: a streamed answer has one of these lines
          // per piece (an NDJSON token is a chunk of its own).
          const b = bytes[at++]!;
          if (this.sizeFlags & SAW_CR) {
            if (b !== LF || this.sizeDigits === 0) throw new ProtocolError("bad chunk size line");
            this.state = this.left === 0 ? "trailers" : "chunk-data";
          } else if (b === CR) this.sizeFlags |= SAW_CR;
          else if (this.sizeFlags & IN_EXTENSION) {
            // chunk-ext (RFC 9112 §7.1.1): read past, never used. It is tokens and quoted strings,
            // so a control byte (a bare LF above all, which would end the line early for some
            // parsers and not for others) means the framing cannot be trusted.
            if ((b < SP && b !== HT) || b === DEL) throw new ProtocolError(`bad byte 0x${b.toString(16)} in a chunk extension`);
            this.countSizeLine();
          } else if (b === SEMICOLON) this.sizeFlags |= IN_EXTENSION;
          else if (b === SP || b === HT) {
            if (this.sizeDigits > 0) this.sizeFlags |= AFTER_DIGITS;
            this.countSizeLine();
          } else {
            // Digits do not count towards the line's limit: any number of leading zeros is a
            // valid size; only a value past 2^48 is refused.
            const d = hexValue(b);
            if (d < 0 || this.sizeFlags & AFTER_DIGITS || this.left > MAX_SIZE_BEFORE_DIGIT) throw new ProtocolError(`bad chunk size (byte 0x${b.toString(16)})`);
            this.sizeDigits++;
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
    if (this.state === "close") return this.finish(false);
    if (this.state === "idle" || this.state === "done") {
      this.keepAlive = false;
      return;
    }
    const where = this.state === "head" ? (this.heldLen > 0 ? "in the middle of the response head" : "before answering") : "in the middle of the response body";
    throw new ProtocolError(`upstream closed the connection ${where}`);
  }

  private countSizeLine(): void {
    if (++this.sizeLineLen > MAX_CHUNK_LINE) throw new ProtocolError(`chunk size line longer than ${MAX_CHUNK_LINE} bytes`);
  }

  private startChunkSize(): void {
    this.state = "chunk-size";
    this.left = 0;
    this.sizeDigits = 0;
    this.sizeLineLen = 0;
    this.sizeFlags = 0;
  }

  /**
   * `more`: bytes follow the end in the same read. Nothing was asked for them, so the connection
   * is not reusable — known before `end()`, on which the pool decides to keep the connection.
   */
  private finish(more: boolean): void {
    if (more) this.keepAlive = false;
    this.state = "done";
    this.sink.end();
  }

  private onHead(block: Uint8Array, more: boolean): void {
    const lines = latin1(block, 0, block.length - 4).split("\r\n");
    const m = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: (.*))?$/.exec(lines[0]!);
    if (!m) throw new ProtocolError(`bad status line ${JSON.stringify(lines[0]!.slice(0, 60))}`);
    const minor = m[1]!;
    const status = Number(m[2]);
    const fields: [string, string][] = [];
    let contentLength: number | undefined;
    let transferEncoding: string | undefined;
    let connection = "";
    let hopByHop = false;
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      const name = line.slice(0, colon);
      // The name is a token (RFC 9110 §5.1), which rules out obs-fold and whitespace before the
      // colon (RFC 9112 §5.2). The value has no control byte but HTAB (RFC 9110 §5.5): a bare CR or
      // LF would end the line for some parsers and not for others, and a client's parser refuses
      // the rest.
      if (colon <= 0 || !TOKEN.test(name) || CTL.test(line)) throw new ProtocolError(`bad header line ${JSON.stringify(line.slice(0, 60))}`);
      const value = trimOws(line, colon + 1);
      const lower = name.toLowerCase();
      if (lower === "content-length") {
        // Any number of leading zeros; a value past 2^53 is refused, not rounded.
        const n = /^\d+$/.test(value) ? Number(value) : NaN;
        if (!(n <= Number.MAX_SAFE_INTEGER) || (contentLength !== undefined && contentLength !== n)) throw new ProtocolError(`bad Content-Length ${JSON.stringify(value)}`);
        contentLength = n;
      } else if (lower === "transfer-encoding") {
        transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
      } else if (lower === "connection") {
        connection += `,${value.toLowerCase()}`;
      }
      if (!hopByHop && isHopByHop(lower)) hopByHop = true;
      fields.push([name, value]);
    }
    if (status < 200) {
      // 101 would hand the connection to another protocol; nothing here asked for one.
      if (status === 101) throw new ProtocolError("unexpected 101 Switching Protocols");
      this.state = "head";
      return;
    }
    const closeRequested = hasToken(connection, "close");
    this.keepAlive = minor === "1" ? !closeRequested : hasToken(connection, "keep-alive") && !closeRequested;
    // RFC 9112 §6.1: HTTP/1.0 has no transfer codings, so its framing is faulty: read, then close.
    if (minor === "0" && transferEncoding !== undefined) this.keepAlive = false;
    let state: State;
    if (this.noBody || status === 204 || status === 304) state = "done";
    else if (transferEncoding !== undefined) {
      checkChunkedOnly(transferEncoding);
      state = "chunk-size";
    } else if (contentLength !== undefined) state = contentLength === 0 ? "done" : "length";
    else state = "close";
    if (state === "close") this.keepAlive = false;
    this.left = contentLength ?? 0;
    this.state = state;
    if (state === "chunk-size") this.startChunkSize();
    const bodyLength = state === "done" ? 0 : state === "length" ? contentLength : undefined;
    if (state === "done" && more) this.keepAlive = false;
    this.sink.head({ status, statusText: m[3] ?? "", fields, hopByHop, keepAlive: this.keepAlive, bodyLength });
    if (state === "done") this.sink.end();
  }

  /** Collects bytes up to and including CRLFCRLF into `taken`; returns the index after it, or -1. */
  private takeUntilBlankLine(bytes: Uint8Array, at: number): number {
    return this.take(bytes, at, BLANK_LINE, MAX_HEAD_BYTES, "response head");
  }

  /** Collects one CRLF-terminated line into `taken`; returns the index after it, or -1. */
  private takeLine(bytes: Uint8Array, at: number, max: number, what: string): number {
    return this.take(bytes, at, CRLF, max, what);
  }

  private take(bytes: Uint8Array, at: number, terminator: Buffer, max: number, what: string): number {
    const t = terminator.length;
    let end = -1;
    if (this.heldLen > 0) {
      // The terminator may straddle the reads: its first k bytes end what is held.
      const held = this.held;
      const n = this.heldLen;
      for (let k = Math.min(t - 1, n); k > 0 && end < 0; k--) {
        let j = 0;
        while (j < t && (j < k ? held[n - k + j] : bytes[at + j - k]) === terminator[j]) j++;
        if (j === t) end = at + t - k;
      }
    }
    if (end < 0) {
      const i = view(bytes).indexOf(terminator, at);
      if (i >= 0) end = i + t;
    }
    if (this.heldLen === 0 && end >= 0) {
      // The usual case: the whole line or head is in this read; no copy.
      if (end - at > max + t) throw new ProtocolError(`${what} longer than ${max} bytes`);
      this.taken = bytes.subarray(at, end);
      return end;
    }
    const upTo = end < 0 ? bytes.length : end;
    if (this.heldLen + upTo - at > max + (end < 0 ? 0 : t)) throw new ProtocolError(`${what} longer than ${max} bytes`);
    this.hold(bytes, at, upTo);
    if (end < 0) return -1;
    this.taken = this.held.subarray(0, this.heldLen);
    this.release();
    return end;
  }

  private hold(bytes: Uint8Array, from: number, to: number): void {
    const need = this.heldLen + to - from;
    if (need > this.held.length) {
      const grown = new Uint8Array(Math.max(need, this.held.length * 2, 1024));
      grown.set(this.held.subarray(0, this.heldLen));
      this.held = grown;
    }
    this.held.set(bytes.subarray(from, to), this.heldLen);
    this.heldLen = need;
  }

  /** Forget what was held; `taken` may still point into it, so it is not reused. */
  private release(): void {
    this.held = NOTHING;
    this.heldLen = 0;
  }
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const CTL = /[\0-\x08\n-\x1f\x7f]/;
const NOTHING = new Uint8Array(0);
const BLANK_LINE = Buffer.from("\r\n\r\n");
const CRLF = Buffer.from("\r\n");

function view(b: Uint8Array): Buffer {
  return Buffer.from(b.buffer, b.byteOffset, b.length);
}

/** RFC 9110 §5.5: a field value without the optional whitespace (SP and HTAB only) around it. */
function trimOws(s: string, from: number): string {
  let a = from;
  let b = s.length;
  while (a < b && (s.charCodeAt(a) === SP || s.charCodeAt(a) === HT)) a++;
  while (b > a && (s.charCodeAt(b - 1) === SP || s.charCodeAt(b - 1) === HT)) b--;
  return s.slice(a, b);
}

/** True when the comma-separated list (lower case) has `token` as an element. */
function hasToken(list: string, token: string): boolean {
  return list.split(",").some((t) => trimOws(t, 0) === token);
}

/** Throws unless the codings are just `chunked` (the file's comment says why). */
function checkChunkedOnly(te: string): void {
  const codings = te.toLowerCase().split(",").map((c) => trimOws(c, 0)).filter((c) => c !== "");
  if (codings.length === 1 && codings[0] === "chunked") return;
  const others = codings.filter((c) => c !== "chunked");
  if (others.length === 0) throw new ProtocolError(`bad Transfer-Encoding ${JSON.stringify(te)}`);
  throw new ProtocolError(`upstream used transfer coding ${others.join(", ")} (Transfer-Encoding: ${te}), which cannot be passed on: only chunked is decoded`);
}

function latin1(b: Uint8Array, from: number, to: number): string {
  return Buffer.from(b.buffer, b.byteOffset + from, Math.max(0, to - from)).toString("latin1");
}
