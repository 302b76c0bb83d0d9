/**
 * The logger: consola for level filtering and dispatch, our own reporter for the two line formats.
 *
 * Text:  `2026-12-02T16:01:29.123Z WARN  message key=value key2="quoted value"`
 *        (ISO time in UTC, level upper-case padded to 5, message, then logfmt-style fields:
 *        bare when the value has no space, quote, `=` or control character, else JSON-quoted.)
 * JSON:  `{"time":"…","level":"warn","msg":"…",…fields}` — one object per line.
 *
 * Units: a field named `*_ms` holds a duration in milliseconds and `*_bytes` a size in bytes, as
 * numbers. JSON keeps them so; text shows them in human units under the name without the suffix
 * (`wait_ms: 8780` → `wait=8.78s`, `vram_bytes: 2684354560` → `vram=2.5GiB`).
 *
 * Levels: debug < info < warn < error, plus `notice` — the few lines an operator wants from a
 * quiet service at the default level (LOGLEVEL=warn): an image job's summary, an upstream coming
 * up, a lease. It is written whenever warn is, labelled `NOTE` (`"level":"notice"` in JSON): not a
 * problem, and not an `INFO` line that LOGLEVEL=warn seemed to promise away.
 *
 * Every line is written synchronously (fs.writeSync), so a line logged right before
 * process.exit() is never lost, on a pipe as well as in LOG_FILE.
 */
import { closeSync, fchmodSync, fstatSync, mkdirSync, openSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { createConsola, type ConsolaInstance, type LogObject } from "consola/core";
import { redactCredentials } from "../config/redact.ts";
import type { LogFormat, LogLevel } from "../config/types.ts";
import { formatBytes, formatDuration } from "./units.ts";

export type { LogFormat, LogLevel };
export type Fields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  /** Shown at the default level (whenever warn is), labelled INFO: see the header. */
  notice(msg: string, fields?: Fields): void;
  /** A logger that adds `fields` to every line (call-site fields win on a clash). */
  child(fields: Fields): Logger;
  /** True when a line at `level` would be written; lets callers skip building expensive fields. */
  enabled(level: LogLevel): boolean;
  readonly level: LogLevel;
  readonly format: LogFormat;
  /** True when ANSI colour may be put into messages (text format, colour on, not a file). */
  readonly color: boolean;
}

export interface RootLogger extends Logger {
  /** Closes LOG_FILE. Nothing is buffered, so this is only about the descriptor. */
  close(): void;
  /** Lines logged inside `fn` reach the destination in one write (the start-up banner). */
  batch(fn: () => void): void;
}

/** Anything with a write(string) method: a capture array in tests, a Node stream, … */
export interface LineSink {
  write(chunk: string): unknown;
}

export interface LoggerOptions {
  level: LogLevel;
  format: LogFormat;
  /** Append to this file instead of stderr; its folder is created. */
  file?: string;
  /** Text format only, never into a file. Callers derive it from NO_COLOR and isatty. */
  color?: boolean;
  /** Write here instead of stderr (ignored when `file` is set). */
  stream?: LineSink;
  /** For tests: a fixed clock. */
  now?: () => Date;
}

// consola's numeric levels (fatal/error 0, warn 1, info 3, debug 4).
const CONSOLA_LEVEL: Record<LogLevel, number> = { error: 0, warn: 1, info: 3, debug: 4 };
const RESERVED = new Set(["time", "level", "msg"]);

const ANSI = {
  reset: "\x1b[0m",
  gray: "\x1b[90m",
  red: "\x1b[31m",
  yellow: "\x1b[33m",
  blue: "\x1b[34m",
  magenta: "\x1b[35m",
} as const;
/** A line's label: a level, or `notice` (see Logger.notice). */
type LineLevel = LogLevel | "notice";

const LEVEL_COLOR: Record<LineLevel, string> = {
  notice: ANSI.blue,
  debug: ANSI.magenta,
  info: ANSI.blue,
  warn: ANSI.yellow,
  error: ANSI.red,
};

/**
 * An Error as one line: `message (CODE): cause message`. Expected failures (refused connections,
 * timeouts) must stay one line; the stack is added as a separate field only at debug.
 */
export function describeError(err: Error): string {
  let s = err.message || err.name;
  const code = (err as { code?: unknown }).code;
  if ((typeof code === "string" || typeof code === "number") && !s.includes(String(code))) s += ` (${code})`;
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error && cause.message && !s.includes(cause.message)) s += `: ${cause.message}`;
  return s;
}

/** Field values as JSON-able data: Errors flattened, bigints stringified, undefined dropped. */
function normalizeFields(fields: Fields, withStack: boolean): [string, unknown][] {
  const out: [string, unknown][] = [];
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    if (v instanceof Error) {
      out.push([k, describeError(v)]);
      if (withStack && v.stack) out.push([`${k}_stack`, v.stack]);
    } else if (typeof v === "bigint") {
      out.push([k, v.toString()]);
    } else {
      out.push([k, v]);
    }
  }
  return out;
}

function safeJson(v: unknown): string {
  try {
    // Errors nested in objects would otherwise serialise as {}.
    const replacer = (_k: string, x: unknown) => (typeof x === "bigint" ? x.toString() : x instanceof Error ? describeError(x) : x);
    return JSON.stringify(v, replacer) ?? String(v);
  } catch {
    return JSON.stringify(String(v));
  }
}

/** logfmt-ish: bare when unambiguous, else a JSON string literal (one line, escapes included). */
function textValue(v: unknown): string {
  // An empty value: null in JSON, a dash people read as "none" here (never "-", nor "null").
  if (v === null) return "–";
  const s = typeof v === "string" ? v : v === null || typeof v !== "object" ? String(v) : safeJson(v);
  if (s === "" || /[\s"=\\\x00-\x1f\x7f]/.test(s)) return JSON.stringify(s);
  return s;
}

/**
 * A message keeps its spaces but never breaks the one-line-per-entry rule, and carries no
 * control characters (no forged lines or terminal escapes from request paths). ESC survives
 * only when colour is on: that is how a coloured request line reaches the terminal.
 */
function oneLine(msg: string, color: boolean): string {
  return msg
    .replace(/\r?\n/g, "\\n")
    .replace(color ? /[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]/g : /[\x00-\x08\x0b-\x1f\x7f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

export function formatTextLine(time: Date, level: LineLevel, msg: string, fields: [string, unknown][], color: boolean): string {
  const lvl = (level === "notice" ? "NOTE" : level.toUpperCase()).padEnd(5);
  const ts = time.toISOString();
  let line = color ? `${ANSI.gray}${ts}${ANSI.reset} ${LEVEL_COLOR[level]}${lvl}${ANSI.reset} ${oneLine(msg, true)}` : `${ts} ${lvl} ${oneLine(msg, false)}`;
  // A unit's suffix is dropped only where the short name is not another field's (`job` and `job_ms`).
  const names = new Set(fields.map(([k]) => k));
  const short = (k: string, suffix: string) => (names.has(k.slice(0, -suffix.length)) ? k : k.slice(0, -suffix.length));
  for (let [k, v] of fields) {
    if (typeof v === "number") {
      if (k.endsWith("_ms")) [k, v] = [short(k, "_ms"), formatDuration(v)];
      else if (k.endsWith("_bytes")) [k, v] = [short(k, "_bytes"), formatBytes(v)];
    }
    line += color ? ` ${ANSI.gray}${k}=${ANSI.reset}${textValue(v)}` : ` ${k}=${textValue(v)}`;
  }
  return line + "\n";
}

export function formatJsonLine(time: Date, level: LineLevel, msg: string, fields: [string, unknown][]): string {
  const obj: Record<string, unknown> = { time: time.toISOString(), level, msg };
  // A field named like a fixed key must not overwrite it: it is kept as "_time" etc.
  for (const [k, v] of fields) {
    // A value that cannot be serialised (a cycle) becomes a string rather than spoiling the line.
    obj[RESERVED.has(k) ? `_${k}` : k] = typeof v === "object" && v !== null ? (JSON.parse(safeJson(v)) as unknown) : v;
  }
  return safeJson(obj) + "\n";
}

/** Writes every byte before returning, even on a pipe that accepts partial writes. */
function writeAllSync(fd: number, text: string): void {
  const buf = Buffer.from(text, "utf8");
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
}

interface Sink {
  write(line: string): void;
  close(): void;
}

function fdSink(fd: number, owned: boolean): Sink {
  let open = true;
  return {
    write(line) {
      if (!open) return;
      try {
        writeAllSync(fd, line);
      } catch {
        // A full disk or a closed stderr must never turn logging into a crash.
      }
    },
    close() {
      if (owned && open) {
        open = false;
        try {
          closeSync(fd);
        } catch {
          /* already gone */
        }
      }
    },
  };
}

/** Owner and group only: request lines name models, paths and client addresses. */
export const LOG_FILE_MODE = 0o640;

function openLogFile(path: string): Sink {
  try {
    mkdirSync(dirname(path), { recursive: true });
    const fd = openSync(path, "a", LOG_FILE_MODE);
    if (process.platform !== "win32") {
      // A file an older version created world-readable is tightened (when it is ours to change).
      const mode = fstatSync(fd).mode & 0o777;
      try {
        if (mode & 0o007) fchmodSync(fd, mode & 0o770);
      } catch {
        /* not ours: leave it */
      }
    }
    return fdSink(fd, true);
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    throw new Error(`cannot open log file ${path}: ${reason}`);
  }
}

interface Core {
  consola: ConsolaInstance;
  level: LogLevel;
  format: LogFormat;
  color: boolean;
}

class ConsolaLogger implements Logger {
  constructor(
    protected readonly core: Core,
    private readonly bindings: Fields,
  ) {}

  get level(): LogLevel {
    return this.core.level;
  }
  get format(): LogFormat {
    return this.core.format;
  }
  get color(): boolean {
    return this.core.color;
  }

  enabled(level: LogLevel): boolean {
    return CONSOLA_LEVEL[level] <= CONSOLA_LEVEL[this.core.level];
  }

  debug(msg: string, fields?: Fields): void {
    this.emit("debug", msg, fields);
  }
  info(msg: string, fields?: Fields): void {
    this.emit("info", msg, fields);
  }
  warn(msg: string, fields?: Fields): void {
    this.emit("warn", msg, fields);
  }
  error(msg: string, fields?: Fields): void {
    this.emit("error", msg, fields);
  }
  notice(msg: string, fields?: Fields): void {
    if (this.enabled("warn")) this.emit("info", msg, fields, true);
  }

  child(fields: Fields): Logger {
    return new ConsolaLogger(this.core, { ...this.bindings, ...fields });
  }

  private emit(level: LogLevel, msg: string, fields: Fields | undefined, notice = false): void {
    if (!notice && !this.enabled(level)) return;
    const merged = fields ? { ...this.bindings, ...fields } : this.bindings;
    // Passed as a log object so consola keeps our fields next to the message untouched.
    // `args: []` keeps an empty message a log object rather than a stray argument.
    this.core.consola[level]({ message: msg, args: [], fields: merged, notice });
  }
}

class RootConsolaLogger extends ConsolaLogger implements RootLogger {
  constructor(
    core: Core,
    private readonly sink: Sink & { cork?: string[] },
  ) {
    super(core, {});
  }
  close(): void {
    this.sink.close();
  }
  batch(fn: () => void): void {
    if (this.sink.cork) return fn(); // already inside a batch: the outer one writes
    const lines: string[] = (this.sink.cork = []);
    try {
      fn();
    } finally {
      this.sink.cork = undefined;
      if (lines.length > 0) this.sink.write(lines.join(""));
    }
  }
}

export function createLogger(opts: LoggerOptions): RootLogger {
  const sink: Sink & { cork?: string[] } = opts.file
    ? openLogFile(opts.file)
    : opts.stream
      ? { write: (line) => void opts.stream?.write(line), close: () => {} }
      : fdSink(2, false);
  const color = opts.format === "text" && !opts.file && opts.color === true;
  const withStack = opts.level === "debug";
  const now = opts.now ?? (() => new Date());

  const reporter = {
    log(obj: LogObject) {
      const level: LineLevel = obj.notice === true ? "notice" : obj.type === "fatal" ? "error" : (obj.type as LogLevel);
      const msg = typeof obj.args[0] === "string" ? obj.args[0] : String(obj.args[0] ?? "");
      const fields = normalizeFields((obj.fields as Fields | undefined) ?? {}, withStack);
      const time = now();
      const line = opts.format === "json" ? formatJsonLine(time, level, msg, fields) : formatTextLine(time, level, msg, fields, color);
      // Whatever a caller put into a message or field — an upstream URL, an error quoting one — its credentials stay out.
      const safe = redactCredentials(line);
      if (sink.cork) sink.cork.push(safe);
      else sink.write(safe);
    },
  };
  const consola = createConsola({
    // Notices pass consola's filter whatever the level; emit() has already decided for them.
    level: CONSOLA_LEVEL.debug,
    reporters: [reporter],
    // consola folds identical lines arriving in quick succession; every request line must be kept.
    throttle: 0,
  });
  return new RootConsolaLogger({ consola, level: opts.level, format: opts.format, color }, sink);
}

// ---- the process-wide logger ------------------------------------------------------------------

let current: Logger = createLogger({ level: "warn", format: "text" });

/** A logger that looks up its target at every call, so it follows setLogger(). */
class DelegatingLogger implements Logger {
  private cachedFor: Logger | undefined;
  private cached: Logger | undefined;

  constructor(private readonly bindings: Fields | undefined) {}

  private target(): Logger {
    if (!this.bindings) return current;
    if (this.cachedFor !== current || !this.cached) {
      this.cachedFor = current;
      this.cached = current.child(this.bindings);
    }
    return this.cached;
  }

  get level(): LogLevel {
    return this.target().level;
  }
  get format(): LogFormat {
    return this.target().format;
  }
  get color(): boolean {
    return this.target().color;
  }
  enabled(level: LogLevel): boolean {
    return this.target().enabled(level);
  }
  debug(msg: string, fields?: Fields): void {
    this.target().debug(msg, fields);
  }
  info(msg: string, fields?: Fields): void {
    this.target().info(msg, fields);
  }
  warn(msg: string, fields?: Fields): void {
    this.target().warn(msg, fields);
  }
  error(msg: string, fields?: Fields): void {
    this.target().error(msg, fields);
  }
  notice(msg: string, fields?: Fields): void {
    this.target().notice(msg, fields);
  }
  child(fields: Fields): Logger {
    return new DelegatingLogger({ ...this.bindings, ...fields });
  }
}

/**
 * The process-wide logger. Import it anywhere; main() calls setLogger() once at startup, and
 * every `log` (and every `log.child(...)`) made before that follows the new configuration.
 * Until then: level warn, text, stderr.
 */
export const log: Logger = new DelegatingLogger(undefined);

/** Replaces the process-wide logger; returns the previous one (tests restore it). */
export function setLogger(l: Logger): Logger {
  // `log` (or a child of it) as its own target would recurse forever.
  if (l instanceof DelegatingLogger) throw new Error("setLogger needs a logger from createLogger(), not `log`");
  const prev = current;
  current = l;
  return prev;
}
