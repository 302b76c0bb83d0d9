/**
 * The env-file format. On Linux the same file is also systemd's `EnvironmentFile=`, so the rules
 * are the subset on which our parser and systemd's agree, and anything where they would silently
 * disagree is an error instead of a surprise:
 *
 * - One `KEY=VALUE` per line. Blank lines and lines whose first non-blank character is `#` are
 *   ignored. A leading `export ` is allowed. Whitespace around the key and after `=` is dropped.
 *   Keys are `[A-Za-z_][A-Za-z0-9_]*`. A UTF-8 BOM and CRLF line ends are tolerated.
 * - Unquoted values are literal up to the end of the line (trailing whitespace dropped); a
 *   backslash is an ordinary character, so `LOG_FILE=C:\ProgramData\x.log` works as written.
 *   There are no inline comments: systemd would keep `60s # note` as the value, so a `#` at the
 *   start of an unquoted value or after whitespace inside it is an error (quote the value if you
 *   mean it). A `#` inside a word (`a#b`) is part of the value.
 * - 'Single quotes': literal, no escapes.
 * - "Double quotes": `\"`, `\\`, `\$` and `` \` `` are escapes (as in systemd); every other
 *   backslash is kept, so "C:\new\dir" stays a Windows path and `\n` is not a newline.
 * - A quoted value must close on the same line, and only whitespace may follow it.
 * - No line continuations; a later line for the same key wins (the caller may warn).
 */

export interface EnvEntry {
  key: string;
  value: string;
  /** 1-based */
  line: number;
}

export class EnvFileError extends Error {
  override name = "EnvFileError";
  constructor(
    readonly file: string,
    readonly line: number,
    readonly reason: string,
  ) {
    super(`${file}:${line}: ${reason}`);
  }
}

const KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Splits text into lines without their line ends, tolerating a BOM and CRLF. */
export function splitLines(text: string): string[] {
  const body = text.startsWith("\ufeff") ? text.slice(1) : text;
  const lines = body.split("\n").map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
  // A final line end does not start another (empty) line.
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** Parses env-file text. `file` only names the source in errors. Throws EnvFileError. */
export function parseEnvFile(text: string, file: string): EnvEntry[] {
  const entries: EnvEntry[] = [];
  splitLines(text).forEach((raw, i) => {
    const entry = parseLine(raw, file, i + 1);
    if (entry) entries.push(entry);
  });
  return entries;
}

function parseLine(raw: string, file: string, line: number): EnvEntry | null {
  const fail = (reason: string): never => {
    throw new EnvFileError(file, line, reason);
  };
  let s = raw.trim();
  if (s === "" || s.startsWith("#")) return null;
  if (/^export[ \t]/.test(s)) s = s.slice("export".length).trimStart();

  const eq = s.indexOf("=");
  if (eq < 0) return fail(`expected KEY=VALUE, got ${JSON.stringify(clip(s))}`);
  const key = s.slice(0, eq).trim();
  if (!KEY.test(key)) {
    return fail(`invalid key ${JSON.stringify(clip(key))} (letters, digits and _, not starting with a digit)`);
  }
  const rest = s.slice(eq + 1).trimStart();
  const value = rest.startsWith('"')
    ? doubleQuoted(rest, key, fail)
    : rest.startsWith("'")
      ? singleQuoted(rest, key, fail)
      : unquoted(rest, key, fail);
  return { key, value, line };
}

function unquoted(rest: string, key: string, fail: (r: string) => never): string {
  const comment = /(^|[ \t])#/.exec(rest);
  if (comment) {
    const note = rest.slice(comment.index).trim();
    fail(
      `${key}: inline comments are not supported (systemd would read ${JSON.stringify(clip(note))} as part of the value); ` +
        `put the comment on its own line, or quote the value if the # belongs to it`,
    );
  }
  return rest.trimEnd();
}

function singleQuoted(rest: string, key: string, fail: (r: string) => never): string {
  const end = rest.indexOf("'", 1);
  if (end < 0) return fail(`${key}: unterminated single quote`);
  afterQuote(rest.slice(end + 1), key, fail);
  return rest.slice(1, end);
}

function doubleQuoted(rest: string, key: string, fail: (r: string) => never): string {
  let out = "";
  for (let i = 1; i < rest.length; i++) {
    const c = rest[i];
    if (c === '"') {
      afterQuote(rest.slice(i + 1), key, fail);
      return out;
    }
    if (c === "\\") {
      const next = rest[i + 1];
      if (next === '"' || next === "\\" || next === "$" || next === "`") {
        out += next;
        i++;
        continue;
      }
    }
    out += c;
  }
  return fail(`${key}: unterminated double quote`);
}

function afterQuote(tail: string, key: string, fail: (r: string) => never): void {
  if (tail.trim() !== "") {
    fail(`${key}: unexpected ${JSON.stringify(clip(tail.trim()))} after the closing quote (comments go on their own line)`);
  }
}

function clip(s: string): string {
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

/**
 * Renders a value so that parseEnvFile reads it back unchanged: bare when that is unambiguous,
 * else single-quoted, else double-quoted. Backslashes stay bare so a Windows LOG_FILE path reads
 * naturally; only systemd (Linux, where paths have no backslashes) would treat them as escapes.
 */
export function formatEnvValue(value: string): string {
  if (/[\r\n]/.test(value)) throw new RangeError("env-file values cannot contain line breaks");
  const bareOk =
    value === value.trim() && !/(^|[ \t])#/.test(value) && !/^["']/.test(value) && !/[$`"']/.test(value);
  if (bareOk) return value;
  if (!value.includes("'")) return `'${value}'`;
  return `"${value.replace(/[\\"$`]/g, (c) => `\\${c}`)}"`;
}
