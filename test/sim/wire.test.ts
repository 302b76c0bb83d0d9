import { describe, expect, test } from "bun:test";
import { formatGoTime } from "../../src/sim/clock.ts";
import { goJson } from "../../src/sim/gojson.ts";
import { parseGoDuration, parseKeepAlive } from "../../src/sim/ollama-wire.ts";
import { dumpsPy, floatRepr, parsePy, PyFloat } from "../../src/sim/pyjson.ts";
import { fixtureText } from "./helpers.ts";

describe("Python json (ComfyUI wire)", () => {
  test("dumps uses ', ' and ': ' separators and keeps floats as floats", () => {
    expect(dumpsPy(parsePy('{"a":1,"b":[1.0,2.50,"x"],"c":{}}'))).toBe('{"a": 1, "b": [1.0, 2.5, "x"], "c": {}}');
  });

  test("float repr matches Python's", () => {
    const cases: [number, string][] = [
      [8, "8.0"],
      [0.1, "0.1"],
      [1e-5, "1e-05"],
      [0.0001, "0.0001"],
      [1e16, "1e+16"],
      [123456789012345.6, "123456789012345.6"],
      [104857600, "104857600.0"],
      [-2.5, "-2.5"],
    ];
    for (const [x, s] of cases) expect(floatRepr(x)).toBe(s);
  });

  test("parse keeps integer-looking keys in document order and big ints exact", () => {
    const v = parsePy('{"10": 1, "9": 2, "seed": 18446744073709551615}');
    expect(dumpsPy(v)).toBe('{"10": 1, "9": 2, "seed": 18446744073709551615}');
  });

  test("ensure_ascii escapes non-ASCII like Python", () => {
    expect(dumpsPy("é\u2028😀\u007f")).toBe('"\\u00e9\\u2028\\ud83d\\ude00\\u007f"');
  });

  test("malformed documents are rejected", () => {
    for (const bad of ["", "{", '{"a" 1}', "[1,]", '{"a":1} x', '"\u0001"']) expect(() => parsePy(bad)).toThrow();
  });

  test("a fixture re-serialises to Python's compact form with floats intact", () => {
    const text = dumpsPy(parsePy(fixtureText("comfy-history-success.json")));
    expect(text).toContain('"cfg": 8.0, "sampler_name": "euler"');
    expect(text).toContain('"parent_node": null');
    expect(dumpsPy(new PyFloat(104857600))).toBe("104857600.0");
  });
});

describe("Go json and time (Ollama wire)", () => {
  test("goJson is compact and escapes HTML characters like encoding/json", () => {
    expect(goJson({ a: "<b>&", n: 1 })).toBe('{"a":"\\u003cb\\u003e\\u0026","n":1}');
  });

  test("created_at is RFC3339Nano UTC with trailing zeros trimmed", () => {
    expect(formatGoTime(Date.UTC(2026, 7, 22, 17, 4, 12, 512) + 0.25, true)).toBe("2026-08-22T17:04:12.51225Z");
    expect(formatGoTime(Date.UTC(2026, 7, 22, 17, 4, 12, 500), true)).toBe("2026-08-22T17:04:12.5Z");
    expect(formatGoTime(Date.UTC(2026, 7, 22, 17, 4, 12), true)).toBe("2026-08-22T17:04:12Z");
  });

  test("local times carry the zone offset (or Z)", () => {
    expect(formatGoTime(Date.now(), false)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/);
  });

  test("keep_alive parsing follows api.Duration", () => {
    expect(parseKeepAlive(0)).toEqual({ ok: true, ms: 0 });
    expect(parseKeepAlive("0")).toEqual({ ok: true, ms: 0 });
    expect(parseKeepAlive("0s")).toEqual({ ok: true, ms: 0 });
    expect(parseKeepAlive(0.5)).toEqual({ ok: true, ms: 0 }); // whole seconds, truncated
    expect(parseKeepAlive(30)).toEqual({ ok: true, ms: 30_000 });
    expect(parseKeepAlive("1h30m")).toEqual({ ok: true, ms: 5_400_000 });
    expect(parseKeepAlive(undefined)).toEqual({ ok: true, ms: undefined });
    const forever = parseKeepAlive(-1);
    expect(forever.ok && forever.ms! > 9e12).toBe(true);
    expect(parseKeepAlive("5")).toEqual({ ok: false, error: 'time: missing unit in duration "5"' });
    expect(parseKeepAlive(true).ok).toBe(false);
    expect(parseGoDuration("300ms")).toBe(300);
  });
});
