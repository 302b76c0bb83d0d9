/**
 * A strict parser for the Prometheus text exposition format 0.0.4, for tests: it accepts what the
 * format allows and throws ExpositionError (with the 1-based line number) on anything else, so a
 * test that parses our /metrics output also proves it is valid.
 *
 * Checked beyond the grammar:
 * - every line ends with "\n" (including the last); no "\r"
 * - `# HELP` / `# TYPE` at most once per family, valid metric name, known type, before any of
 *   the family's samples; by default every family must have both (our exporter always writes them)
 * - a family's lines are contiguous (no returning to a family after another one started)
 * - metric and label names valid, label names not `__`-reserved and not repeated, label values
 *   using only the escapes \\ \" \n; HELP text only \\ and \n
 * - values: decimal floats, `+Inf`, `-Inf`, `NaN`; optional integer timestamp
 * - no duplicate series
 * - counters non-negative; histogram series: `_bucket` has `le`, `_sum`/`_count` have none,
 *   `le` strictly ascending, cumulative counts non-decreasing, a `+Inf` bucket, `_sum` and
 *   `_count` present, `_count` == the `+Inf` bucket; summary quantile samples carry `quantile`
 */

export type MetricType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

export interface Sample {
  /** The sample's own name, e.g. `x_bucket` in family `x`. */
  name: string;
  labels: Record<string, string>;
  value: number;
  timestamp?: number;
  line: number;
}

export interface Family {
  name: string;
  type: MetricType;
  help: string | undefined;
  samples: Sample[];
}

export interface Exposition {
  families: Map<string, Family>;
}

export interface ParseOptions {
  /** Default true: every family must have `# HELP` and `# TYPE`. False allows untyped samples. */
  requireHelpAndType?: boolean;
}

export class ExpositionError extends Error {
  constructor(
    readonly line: number,
    readonly reason: string,
  ) {
    super(`line ${line}: ${reason}`);
    this.name = "ExpositionError";
  }
}

const TYPES: readonly MetricType[] = ["counter", "gauge", "histogram", "summary", "untyped"];
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const FLOAT = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;
const INTEGER = /^-?\d+$/;

export function parseFloatStrict(s: string): number | undefined {
  if (s === "+Inf") return Infinity;
  if (s === "-Inf") return -Infinity;
  if (s === "NaN") return NaN;
  return FLOAT.test(s) ? Number(s) : undefined;
}

interface FamilyState extends Family {
  declaredType: boolean;
  sawSample: boolean;
}

/** The family a sample name belongs to, by the declared types. */
function resolveFamily(name: string, families: Map<string, FamilyState>): { family: string; suffix: "" | "_bucket" | "_sum" | "_count" } {
  for (const suffix of ["_bucket", "_sum", "_count"] as const) {
    if (!name.endsWith(suffix)) continue;
    const base = families.get(name.slice(0, -suffix.length));
    if (base?.type === "histogram") return { family: base.name, suffix };
    if (base?.type === "summary" && suffix !== "_bucket") return { family: base.name, suffix };
  }
  return { family: name, suffix: "" };
}

function unescape(s: string, allowQuote: boolean, lineNo: number, what: string): string {
  let out = "";
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c !== "\\") {
      out += c;
      continue;
    }
    const n = s[i + 1];
    if (n === "\\") out += "\\";
    else if (n === "n") out += "\n";
    else if (n === '"' && allowQuote) out += '"';
    else throw new ExpositionError(lineNo, `invalid escape sequence "\\${n ?? ""}" in ${what}`);
    i++;
  }
  return out;
}

function skipBlanks(s: string, i: number): number {
  while (i < s.length && (s[i] === " " || s[i] === "\t")) i++;
  return i;
}

function parseComment(line: string, lineNo: number): { kind: "HELP" | "TYPE"; name: string; rest: string } | undefined {
  let i = skipBlanks(line, 1);
  const m = /^\S+/.exec(line.slice(i));
  if (!m || (m[0] !== "HELP" && m[0] !== "TYPE")) return undefined; // a plain comment
  const kind = m[0];
  i += kind.length;
  if (i < line.length && line[i] !== " " && line[i] !== "\t") return undefined;
  i = skipBlanks(line, i);
  const nameM = /^\S+/.exec(line.slice(i));
  if (!nameM) throw new ExpositionError(lineNo, `# ${kind} without a metric name`);
  const name = nameM[0];
  const valid = METRIC_NAME.exec(name);
  if (!valid || valid[0] !== name) throw new ExpositionError(lineNo, `invalid metric name ${JSON.stringify(name)} in # ${kind}`);
  i += name.length;
  if (i < line.length) {
    if (line[i] !== " " && line[i] !== "\t") throw new ExpositionError(lineNo, `expected a blank after the metric name in # ${kind}`);
    i++;
  }
  return { kind, name, rest: line.slice(i) };
}

function parseSample(line: string, lineNo: number): { name: string; labels: Record<string, string>; value: number; timestamp?: number } {
  let i = skipBlanks(line, 0);
  const nameM = METRIC_NAME.exec(line.slice(i));
  if (!nameM) throw new ExpositionError(lineNo, `invalid metric name at column ${i + 1}`);
  const name = nameM[0];
  i += name.length;
  const labels: Record<string, string> = {};
  const brace = skipBlanks(line, i);
  if (line[brace] === "{") {
    i = brace + 1;
    for (;;) {
      i = skipBlanks(line, i);
      if (line[i] === "}") {
        i++;
        break;
      }
      const ln = LABEL_NAME.exec(line.slice(i));
      if (!ln) throw new ExpositionError(lineNo, `invalid label name at column ${i + 1}`);
      const labelName = ln[0];
      if (labelName.startsWith("__")) throw new ExpositionError(lineNo, `reserved label name ${labelName}`);
      if (Object.hasOwn(labels, labelName)) throw new ExpositionError(lineNo, `duplicate label ${labelName}`);
      i = skipBlanks(line, i + labelName.length);
      if (line[i] !== "=") throw new ExpositionError(lineNo, `expected "=" after label ${labelName}`);
      i = skipBlanks(line, i + 1);
      if (line[i] !== '"') throw new ExpositionError(lineNo, `expected '"' to open the value of label ${labelName}`);
      i++;
      let raw = "";
      for (;;) {
        const c = line[i];
        if (c === undefined) throw new ExpositionError(lineNo, `unterminated value of label ${labelName}`);
        if (c === '"') break;
        if (c === "\\") {
          raw += c + (line[i + 1] ?? "");
          i += 2;
          continue;
        }
        raw += c;
        i++;
      }
      i++; // closing quote
      labels[labelName] = unescape(raw, true, lineNo, `label ${labelName}`);
      i = skipBlanks(line, i);
      if (line[i] === ",") {
        i++;
        continue;
      }
      if (line[i] === "}") {
        i++;
        break;
      }
      throw new ExpositionError(lineNo, `expected "," or "}" after label ${labelName}`);
    }
  }
  const rest = line.slice(i);
  const m = /^[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$/.exec(rest);
  if (!m) throw new ExpositionError(lineNo, `expected " <value> [timestamp]" after ${name}, got ${JSON.stringify(rest)}`);
  const value = parseFloatStrict(m[1] as string);
  if (value === undefined) throw new ExpositionError(lineNo, `invalid value ${JSON.stringify(m[1])}`);
  const sample: { name: string; labels: Record<string, string>; value: number; timestamp?: number } = { name, labels, value };
  if (m[2] !== undefined) {
    if (!INTEGER.test(m[2])) throw new ExpositionError(lineNo, `invalid timestamp ${JSON.stringify(m[2])}`);
    sample.timestamp = Number(m[2]);
  }
  return sample;
}

function seriesKey(name: string, labels: Record<string, string>, omit?: string): string {
  const entries = Object.entries(labels)
    .filter(([k]) => k !== omit)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([name, entries]);
}

function checkHistogram(f: Family): void {
  interface Series {
    buckets: { le: number; value: number; line: number }[];
    sum?: Sample;
    count?: Sample;
    firstLine: number;
  }
  const series = new Map<string, Series>();
  for (const s of f.samples) {
    const key = seriesKey(f.name, s.labels, "le");
    let entry = series.get(key);
    if (!entry) {
      entry = { buckets: [], firstLine: s.line };
      series.set(key, entry);
    }
    if (s.name === `${f.name}_bucket`) {
      const le = parseFloatStrict(s.labels.le as string) as number;
      const prev = entry.buckets.at(-1);
      if (prev && !(le > prev.le)) throw new ExpositionError(s.line, `bucket le="${s.labels.le}" not above the previous le`);
      if (prev && s.value < prev.value) throw new ExpositionError(s.line, `bucket counts not cumulative: ${s.value} < ${prev.value}`);
      entry.buckets.push({ le, value: s.value, line: s.line });
    } else if (s.name === `${f.name}_sum`) {
      entry.sum = s;
    } else {
      entry.count = s;
    }
  }
  for (const e of series.values()) {
    const last = e.buckets.at(-1);
    if (!last || last.le !== Infinity) throw new ExpositionError(last?.line ?? e.firstLine, `histogram ${f.name} series without a +Inf bucket`);
    if (!e.count) throw new ExpositionError(e.firstLine, `histogram ${f.name} series without _count`);
    if (!e.sum) throw new ExpositionError(e.firstLine, `histogram ${f.name} series without _sum`);
    if (e.count.value !== last.value) {
      throw new ExpositionError(e.count.line, `histogram ${f.name}: _count ${e.count.value} != +Inf bucket ${last.value}`);
    }
  }
}

export function parseExposition(text: string, opts: ParseOptions = {}): Exposition {
  const requireHelpAndType = opts.requireHelpAndType ?? true;
  const families = new Map<string, FamilyState>();
  const seen = new Set<string>();
  const closed = new Set<string>();
  let current: string | undefined;

  const lines = text.split("\n");
  if (text !== "" && lines.at(-1) !== "") throw new ExpositionError(lines.length, "missing final newline");
  lines.pop();

  const enter = (name: string, lineNo: number): void => {
    if (name === current) return;
    if (closed.has(name)) throw new ExpositionError(lineNo, `family ${name} continues after another family started`);
    if (current !== undefined) closed.add(current);
    current = name;
  };
  const familyOf = (name: string): FamilyState => {
    let f = families.get(name);
    if (!f) {
      f = { name, type: "untyped", help: undefined, samples: [], declaredType: false, sawSample: false };
      families.set(name, f);
    }
    return f;
  };

  lines.forEach((line, idx) => {
    const lineNo = idx + 1;
    if (line.includes("\r")) throw new ExpositionError(lineNo, "carriage return in line");
    const start = skipBlanks(line, 0);
    if (start === line.length) return; // blank line
    if (line[start] === "#") {
      const c = parseComment(line.slice(start), lineNo);
      if (!c) return;
      const derived = resolveFamily(c.name, families);
      if (derived.family !== c.name) throw new ExpositionError(lineNo, `# ${c.kind} ${c.name} collides with ${derived.family}'s samples`);
      enter(c.name, lineNo);
      const f = familyOf(c.name);
      if (f.sawSample) throw new ExpositionError(lineNo, `# ${c.kind} ${c.name} after its samples`);
      if (c.kind === "HELP") {
        if (f.help !== undefined) throw new ExpositionError(lineNo, `second # HELP for ${c.name}`);
        f.help = unescape(c.rest, false, lineNo, "HELP text");
      } else {
        if (f.declaredType) throw new ExpositionError(lineNo, `second # TYPE for ${c.name}`);
        const t = c.rest.replace(/[ \t]+$/, "");
        if (!(TYPES as readonly string[]).includes(t)) throw new ExpositionError(lineNo, `unknown type ${JSON.stringify(t)} for ${c.name}`);
        f.type = t as MetricType;
        f.declaredType = true;
      }
      return;
    }

    const s = parseSample(line, lineNo);
    const { family, suffix } = resolveFamily(s.name, families);
    enter(family, lineNo);
    const f = familyOf(family);
    if (requireHelpAndType && !f.declaredType) throw new ExpositionError(lineNo, `sample ${s.name} without # TYPE`);
    if (requireHelpAndType && f.help === undefined) throw new ExpositionError(lineNo, `sample ${s.name} without # HELP`);
    const key = seriesKey(s.name, s.labels);
    if (seen.has(key)) throw new ExpositionError(lineNo, `duplicate series ${s.name}${JSON.stringify(s.labels)}`);
    seen.add(key);

    switch (f.type) {
      case "counter":
        if (!(s.value >= 0)) throw new ExpositionError(lineNo, `counter ${s.name} has value ${s.value}`);
        break;
      case "histogram":
        if (suffix === "") throw new ExpositionError(lineNo, `histogram ${family} sample without _bucket/_sum/_count suffix`);
        if (suffix === "_bucket") {
          const le = s.labels.le;
          if (le === undefined) throw new ExpositionError(lineNo, `${s.name} without le label`);
          if (parseFloatStrict(le) === undefined || Number.isNaN(parseFloatStrict(le))) {
            throw new ExpositionError(lineNo, `${s.name} has invalid le="${le}"`);
          }
          if (!(s.value >= 0)) throw new ExpositionError(lineNo, `${s.name} has count ${s.value}`);
        } else {
          if (s.labels.le !== undefined) throw new ExpositionError(lineNo, `${s.name} must not carry le`);
          if (suffix === "_count" && !(s.value >= 0)) throw new ExpositionError(lineNo, `${s.name} has count ${s.value}`);
        }
        break;
      case "summary":
        if (suffix === "" && s.labels.quantile === undefined) throw new ExpositionError(lineNo, `summary ${s.name} without quantile label`);
        if (suffix !== "" && s.labels.quantile !== undefined) throw new ExpositionError(lineNo, `${s.name} must not carry quantile`);
        break;
      default:
        break;
    }
    f.sawSample = true;
    f.samples.push({ ...s, line: lineNo });
  });

  const out = new Map<string, Family>();
  for (const f of families.values()) {
    if (requireHelpAndType && !f.declaredType) throw new ExpositionError(lines.length, `family ${f.name} without # TYPE`);
    if (f.type === "histogram") checkHistogram(f);
    out.set(f.name, { name: f.name, type: f.type, help: f.help, samples: f.samples });
  }
  return { families: out };
}

/** `a` (a sample's labels) is exactly `b`; the turnstile's `card` label, on every series, counts only when `b` names it. */
function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a).filter((k) => k !== "card" || Object.hasOwn(b, "card"));
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

/** The value of the sample with exactly this name and exactly these labels (none = no labels; `card` only if named). */
export function sampleValue(parsed: Exposition, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const f of parsed.families.values()) {
    for (const s of f.samples) if (s.name === name && sameLabels(s.labels, labels)) return s.value;
  }
  return undefined;
}
