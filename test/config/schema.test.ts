import { describe, expect, test } from "bun:test";
import * as v from "valibot";
import { parseSetting, quickParse, settingSchema } from "../../src/config/schema.ts";
import { defaultText, SETTINGS } from "../../src/config/settings.ts";

// Values an operator might write for any setting: valid ones of every kind, near misses, and
// edge cases of each rule (bounds, case, trailing slashes, query strings, zero, auto).
const CANDIDATES = [
  "", " ", "0", "1", "7", "42", "100", "399", "400", "599", "600", "1023", "1024", "86400", "86401", "65535", "65536", "4294967296", "-1", "1.5", "01", "1e3",
  "auto", "AUTO", "Auto ", "true", "FALSE", "yes", "off", "maybe",
  "0s", "0ms", "1ms", "500ms", "60s", "1h30m", "24h", "596h", "597h", "9999h", "10", "1x", "s", "1.5s",
  "json", "JSON", "pretty", "debug", "INFO", "warn", "error", "wait", "queue", "reject", "503", "429",
  "http://127.0.0.1:11434", "http://127.0.0.1:11434/", "https://user:pw@gpu.lan:8188///", "http://h/base/",
  "ftp://h", "http://", "127.0.0.1:11434", "localhost:11434", "http://h/?x=1", "http://h/#f", "http://h?",
  "http://h#", "file:///tmp", "http://[::1]:1",
  "127.0.0.1:11435", "0.0.0.0:8188", "[::1]:8080", ":8080", "11435", "host:99999", "[::1]", "localhost:0",
  "*", "*.lan", "gpu.lan, *.home", "[fe80::1]", "a b", "0123456789abcdef", "short", "a token with spaces xx",
  "name.log", "dir/name", "stable", "dev", "v1.2.3", "v01.2.3", "1.2.3",
  "forge", "FORGE", "a1111", "constructor", "__proto__",
];

describe("settings checked without valibot", () => {
  test("give exactly the answers of the valibot schemas for every setting", () => {
    let quick = 0;
    for (const def of SETTINGS) {
      for (const text of [...CANDIDATES, defaultText(def, { os: "linux", arch: "x64" })]) {
        const fast = quickParse(def, text);
        const slow = v.safeParse(settingSchema(def), text, { abortEarly: true });
        const where = `${def.key}=${JSON.stringify(text)}`;
        if (fast === undefined) {
          expect(slow.success, where).toBe(false);
        } else {
          quick++;
          expect(slow.success, where).toBe(true);
          expect(slow.success && slow.output, where).toBe(fast);
        }
      }
    }
    // The comparison means something only when both paths accept a good share of the values.
    expect(quick).toBeGreaterThan(SETTINGS.length * 5);
  });

  test("a bad value still gets the schema's message", () => {
    const def = SETTINGS.find((d) => d.kind === "duration")!;
    expect(parseSetting(def, "soon")).toEqual({ ok: false, message: expect.stringContaining("expected a duration like 500ms") });
  });
});
