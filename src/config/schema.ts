/**
 * One valibot schema per setting kind: env-file text in, typed Config value out. Issue messages
 * say what was expected; the loader adds the key, where the value came from and what it was.
 */
import * as v from "valibot";
import { DurationError, formatDuration, parseDuration } from "./duration.ts";
import { ListenError, parseListen } from "./listen.ts";
import { MAX_TIMER_MS, type SettingDef } from "./settings.ts";

export type SettingValue = string | number | boolean;
export type SettingSchema = v.GenericSchema<string, SettingValue>;

const TRUE = new Set(["true", "1", "yes", "on"]);
const FALSE = new Set(["false", "0", "no", "off"]);

function durationSchema(def: SettingDef): SettingSchema {
  return v.pipe(
    v.string(),
    v.rawTransform(({ dataset, addIssue, NEVER }) => {
      try {
        return parseDuration(dataset.value);
      } catch (e) {
        const why = e instanceof DurationError ? ` (${e.message})` : "";
        addIssue({ message: `expected a duration like 500ms, 60s or 1h30m${why}` });
        return NEVER;
      }
    }),
    v.check((ms) => def.allowZero === true || ms > 0, "must be greater than 0"),
    def.max === undefined
      ? v.maxValue(MAX_TIMER_MS, `must be at most ${formatDuration(MAX_TIMER_MS)} (the longest timer the runtime supports)`)
      : v.maxValue(def.max, `must be at most ${formatDuration(def.max)}`),
  );
}

function intSchema(def: SettingDef): SettingSchema {
  const min = def.min ?? 0;
  const max = def.max ?? Number.MAX_SAFE_INTEGER;
  const whole = def.auto ? 'expected "auto" or a whole number' : "expected a whole number";
  const num = v.pipe(
    v.string(),
    v.regex(/^[0-9]+$/, whole),
    v.transform(Number),
    v.minValue(min, `must be between ${min} and ${max}`),
    v.maxValue(max, `must be between ${min} and ${max}`),
  );
  if (!def.auto) return num;
  return v.pipe(
    v.string(),
    v.rawTransform(({ dataset, addIssue, NEVER }) => {
      if (dataset.value.toLowerCase() === "auto") return "auto";
      const r = v.safeParse(num, dataset.value, { abortEarly: true });
      if (r.success) return r.output;
      addIssue({ message: r.issues[0].message });
      return NEVER;
    }),
  );
}

function enumSchema(def: SettingDef): SettingSchema {
  const values = def.values ?? [];
  // An alias is named beside its value: "a1111" (or "forge").
  const aliasesOf = (x: string) => Object.keys(def.valueAliases ?? {}).filter((a) => def.valueAliases![a] === x);
  const quoted = values.map((x) => `"${x}"${aliasesOf(x).map((a) => ` (or "${a}")`).join("")}`);
  const list = quoted.length <= 2 ? quoted.join(" or ") : `${quoted.slice(0, -1).join(", ")} or ${quoted.at(-1)}`;
  return v.pipe(v.string(), v.transform((s) => enumValue(def, s)), v.picklist(values, `expected ${list}`));
}

/** The lowercased input, an alias read as its value. */
function enumValue(def: SettingDef, text: string): string {
  const s = text.toLowerCase();
  // Own keys only: "constructor" is no alias.
  return def.valueAliases && Object.hasOwn(def.valueAliases, s) ? def.valueAliases[s]! : s;
}

function boolSchema(): SettingSchema {
  return v.pipe(
    v.string(),
    v.rawTransform(({ dataset, addIssue, NEVER }) => {
      const s = dataset.value.toLowerCase();
      if (TRUE.has(s)) return true;
      if (FALSE.has(s)) return false;
      addIssue({ message: 'expected "true" or "false"' });
      return NEVER;
    }),
  );
}

/**
 * Host and port written without a scheme, as OLLAMA_HOST is (`127.0.0.1:11435`), made a URL: the
 * hint for a value that is not one. (`localhost:11435` does parse, as a URL of scheme "localhost:".)
 */
export function withScheme(s: string): string | undefined {
  if (s.includes("//") || !HOST_PORT.test(s)) return undefined;
  return URL.canParse(`http://${s}`) ? `http://${s}` : undefined;
}
const HOST_PORT = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(:[0-9]{1,5})?(\/|$)/i;

/** Absolute http(s) base URL; trailing slashes dropped so callers can append "/api/ps". */
function urlSchema(): SettingSchema {
  return v.pipe(
    v.string(),
    v.rawTransform(({ dataset, addIssue, NEVER }) => {
      const s = dataset.value;
      let u: URL | undefined;
      try {
        u = new URL(s);
      } catch {
        // reported below
      }
      if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.hostname === "") {
        const guess = withScheme(s);
        addIssue({ message: `expected an absolute http:// or https:// URL${guess ? ` (did you mean "${guess}"?)` : ""}` });
        return NEVER;
      }
      if (u.search !== "" || u.hash !== "" || s.includes("?") || s.includes("#")) {
        addIssue({ message: "a base URL cannot have a query or fragment" });
        return NEVER;
      }
      // With credentials, the parser's form: it percent-encodes what would end the URL in a log
      // line (a space, `"`, a second `@`), so redact.ts masks the whole password wherever it is shown.
      return (u.username || u.password ? u.href : s).replace(/\/+$/, "");
    }),
  );
}

function listenSchema(): SettingSchema {
  return v.pipe(
    v.string(),
    v.rawTransform(({ dataset, addIssue, NEVER }) => {
      try {
        parseListen(dataset.value);
        return dataset.value;
      } catch (e) {
        addIssue({ message: e instanceof ListenError ? e.message : String(e) });
        return NEVER;
      }
    }),
  );
}

function stringSchema(def: SettingDef): SettingSchema {
  return def.pattern ? v.pipe(v.string(), v.regex(def.pattern, `expected ${def.expected ?? String(def.pattern)}`)) : v.string();
}

const cache = new WeakMap<SettingDef, SettingSchema>();

export function settingSchema(def: SettingDef): SettingSchema {
  let schema = cache.get(def);
  if (!schema) {
    schema = buildSchema(def);
    cache.set(def, schema);
  }
  return schema;
}

function buildSchema(def: SettingDef): SettingSchema {
  switch (def.kind) {
    case "duration":
      return durationSchema(def);
    case "int":
      return intSchema(def);
    case "enum":
      return enumSchema(def);
    case "bool":
      return boolSchema();
    case "url":
      return urlSchema();
    case "listen":
      return listenSchema();
    case "string":
      return stringSchema(def);
  }
}

/**
 * The value when `text` is plainly valid, by the same rules as the schemas; undefined sends it
 * through valibot. A start with valid settings then never builds or runs a schema (that first
 * pass was 1–1.5 ms of a compiled start, docs/BENCHMARKS.md), while every message still comes
 * from the schema. test/config/schema.test.ts holds the two to the same answers.
 */
export function quickParse(def: SettingDef, text: string): SettingValue | undefined {
  switch (def.kind) {
    case "duration": {
      let ms: number;
      try {
        ms = parseDuration(text);
      } catch {
        return undefined;
      }
      return (def.allowZero === true || ms > 0) && ms <= (def.max ?? MAX_TIMER_MS) ? ms : undefined;
    }
    case "int": {
      if (def.auto && text.toLowerCase() === "auto") return "auto";
      if (!/^[0-9]+$/.test(text)) return undefined;
      const n = Number(text);
      return n >= (def.min ?? 0) && n <= (def.max ?? Number.MAX_SAFE_INTEGER) ? n : undefined;
    }
    case "enum": {
      const s = enumValue(def, text);
      return def.values?.includes(s) ? s : undefined;
    }
    case "bool": {
      const s = text.toLowerCase();
      return TRUE.has(s) ? true : FALSE.has(s) ? false : undefined;
    }
    case "url": {
      if (text.includes("?") || text.includes("#")) return undefined;
      const u = URL.parse(text);
      if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.hostname === "" || u.search !== "" || u.hash !== "") return undefined;
      return text.replace(/\/+$/, "");
    }
    case "listen":
      try {
        parseListen(text);
        return text;
      } catch {
        return undefined;
      }
    case "string":
      return !def.pattern || def.pattern.test(text) ? text : undefined;
  }
}

/** The parsed value, or the first problem as a message (without key or input). */
export function parseSetting(
  def: SettingDef,
  text: string,
): { ok: true; value: SettingValue } | { ok: false; message: string } {
  const quick = quickParse(def, text);
  if (quick !== undefined) return { ok: true, value: quick };
  const result = v.safeParse(settingSchema(def), text, { abortEarly: true });
  if (result.success) return { ok: true, value: result.output };
  return { ok: false, message: result.issues[0].message };
}
