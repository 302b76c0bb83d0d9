/**
 * Python's `json` module, as ComfyUI (aiohttp) uses it: `json.loads` keeps the difference between
 * `8` and `8.0`, keeps object keys in document order even when they look like integers (node ids),
 * and has arbitrary-precision ints (64-bit seeds); `json.dumps` writes `", "` / `": "` separators
 * with `ensure_ascii`. A JS object would reorder "10" before "9" and lose every one of those.
 */

/** A Python float: serialised with `repr()` (`8.0`, `1e-05`), never as an int. */
export class PyFloat {
  constructor(readonly value: number) {}
}

/** A Python dict: insertion-ordered, any string key. */
export type PyDict = Map<string, PyValue>;
export type PyValue = null | boolean | number | bigint | string | PyFloat | PyValue[] | PyDict;
/** What `dumpsPy` accepts: Python values plus plain JS objects for responses we build ourselves. */
export type PyLike = PyValue | PyLike[] | Map<string, PyLike> | { [key: string]: PyLike | undefined };

export class PyJsonError extends Error {}

export function isDict(v: unknown): v is PyDict {
  return v instanceof Map;
}

/** Python's `str()` of a parsed value, for places where ComfyUI does `str(x)`. */
export function pyStr(v: PyValue): string {
  if (v === null) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "bigint") return String(v);
  if (v instanceof PyFloat) return floatRepr(v.value);
  return dumpsPy(v);
}

/** A number as JS sees it, whatever Python type it has; undefined for non-numbers. */
export function pyNumber(v: PyValue | undefined): number | undefined {
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return Number(v);
  if (v instanceof PyFloat) return v.value;
  return undefined;
}

// ---------------------------------------------------------------- parse

export function parsePy(text: string): PyValue {
  const p = new Parser(text);
  p.ws();
  const v = p.value();
  p.ws();
  if (p.i !== text.length) throw new PyJsonError(`Extra data at char ${p.i}`);
  return v;
}

class Parser {
  i = 0;
  constructor(private readonly s: string) {}

  ws(): void {
    while (this.i < this.s.length) {
      const c = this.s.charCodeAt(this.i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) this.i++;
      else break;
    }
  }

  fail(what: string): never {
    throw new PyJsonError(`${what} at char ${this.i}`);
  }

  value(): PyValue {
    const c = this.s[this.i];
    switch (c) {
      case "{":
        return this.object();
      case "[":
        return this.array();
      case '"':
        return this.string();
      case "t":
        return this.word("true", true);
      case "f":
        return this.word("false", false);
      case "n":
        return this.word("null", null);
      case "N":
        return this.word("NaN", new PyFloat(NaN));
      case "I":
        return this.word("Infinity", new PyFloat(Infinity));
      default:
        if (c === "-" && this.s.startsWith("-Infinity", this.i)) return this.word("-Infinity", new PyFloat(-Infinity));
        if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return this.number();
        return this.fail("Expecting value");
    }
  }

  word<T extends PyValue>(w: string, v: T): T {
    if (!this.s.startsWith(w, this.i)) this.fail("Expecting value");
    this.i += w.length;
    return v;
  }

  number(): PyValue {
    const m = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/.exec(this.s.slice(this.i, this.i + 400));
    if (!m) return this.fail("Expecting value");
    this.i += m[0].length;
    if (m[1] !== undefined || m[2] !== undefined) return new PyFloat(Number(m[0]));
    const n = Number(m[0]);
    return Number.isSafeInteger(n) ? n : BigInt(m[0]);
  }

  string(): string {
    this.i++; // opening quote
    let out = "";
    for (;;) {
      const c = this.s[this.i];
      if (c === undefined) this.fail("Unterminated string starting");
      if (c === '"') {
        this.i++;
        return out;
      }
      if (c === "\\") {
        const e = this.s[this.i + 1];
        this.i += 2;
        switch (e) {
          case '"':
          case "\\":
          case "/":
            out += e;
            break;
          case "b":
            out += "\b";
            break;
          case "f":
            out += "\f";
            break;
          case "n":
            out += "\n";
            break;
          case "r":
            out += "\r";
            break;
          case "t":
            out += "\t";
            break;
          case "u": {
            const hex = this.s.slice(this.i, this.i + 4);
            if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("Invalid \\uXXXX escape");
            out += String.fromCharCode(parseInt(hex, 16));
            this.i += 4;
            break;
          }
          default:
            this.fail("Invalid \\escape");
        }
        continue;
      }
      // json.loads(strict=True) refuses raw control characters inside strings.
      if (c.charCodeAt(0) < 0x20) this.fail("Invalid control character");
      out += c;
      this.i++;
    }
  }

  array(): PyValue[] {
    this.i++;
    const out: PyValue[] = [];
    this.ws();
    if (this.s[this.i] === "]") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      out.push(this.value());
      this.ws();
      const c = this.s[this.i++];
      if (c === "]") return out;
      if (c !== ",") this.fail("Expecting ',' delimiter");
    }
  }

  object(): PyDict {
    this.i++;
    const out: PyDict = new Map();
    this.ws();
    if (this.s[this.i] === "}") {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.s[this.i] !== '"') this.fail("Expecting property name enclosed in double quotes");
      const k = this.string();
      this.ws();
      if (this.s[this.i++] !== ":") this.fail("Expecting ':' delimiter");
      this.ws();
      // Python dicts keep a duplicate key at its first position with the last value; so does Map.set.
      out.set(k, this.value());
      this.ws();
      const c = this.s[this.i++];
      if (c === "}") return out;
      if (c !== ",") this.fail("Expecting ',' delimiter");
    }
  }
}

// ---------------------------------------------------------------- dump

const NAMED: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

/** `json.dumps(s)` with ensure_ascii: everything outside printable ASCII becomes `\uxxxx` (lowercase). */
export function pyString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i] as string;
    const code = s.charCodeAt(i);
    const named = NAMED[ch];
    if (named !== undefined) out += named;
    else if (code < 0x20 || code > 0x7e) out += "\\u" + code.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

/** Python's `repr(float)`: shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16. */
export function floatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mant = "0", expStr = "0"] = x.toExponential().split("e");
  const exp = Number(expStr);
  const neg = mant.startsWith("-");
  const digits = mant.replace("-", "").replace(".", "");
  const sign = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exp).toString().padStart(2, "0");
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${e}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const intPart = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  const frac = digits.slice(exp + 1);
  return `${sign}${intPart}.${frac === "" ? "0" : frac}`;
}

/** `json.dumps(value)` with Python's default separators. */
export function dumpsPy(value: PyLike | undefined): string {
  if (value === null || value === undefined) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return pyString(value);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number") {
    // A JS number that is not an integer can only have come from our own code meaning a float.
    return Number.isInteger(value) ? String(value) : floatRepr(value);
  }
  if (value instanceof PyFloat) return floatRepr(value.value);
  if (Array.isArray(value)) return "[" + value.map((v) => dumpsPy(v)).join(", ") + "]";
  const entries: [string, PyLike | undefined][] = value instanceof Map ? [...value.entries()] : Object.entries(value);
  const parts: string[] = [];
  for (const [k, v] of entries) {
    if (v === undefined) continue;
    parts.push(`${pyString(k)}: ${dumpsPy(v)}`);
  }
  return "{" + parts.join(", ") + "}";
}
