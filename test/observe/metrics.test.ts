import { describe, expect, test } from "bun:test";
import { Counter, Gauge, Histogram, PROMETHEUS_CONTENT_TYPE, Registry, formatValue } from "../../src/observe/metrics.ts";
import { parseExposition, sampleValue } from "../support/prom-parse.ts";

describe("Registry.render", () => {
  test("the content type is text format 0.0.4", () => {
    expect(PROMETHEUS_CONTENT_TYPE).toBe("text/plain; version=0.0.4; charset=utf-8");
  });

  test("counter: HELP, TYPE, labelled samples, exact text", () => {
    const r = new Registry();
    const c = r.counter<{ code: string }>({ name: "req_total", help: "Requests.", labelNames: ["code"] });
    c.inc({ code: "500" });
    c.inc({ code: "200" }, 2);
    c.inc({ code: "200" });
    expect(r.render()).toBe(
      '# HELP req_total Requests.\n# TYPE req_total counter\nreq_total{code="200"} 3\nreq_total{code="500"} 1\n',
    );
    expect(c.get({ code: "200" })).toBe(3);
    expect(c.get({ code: "404" })).toBe(0);
  });

  test("a labelled metric without observations renders only HELP/TYPE; initLabels show zeros", () => {
    const r = new Registry();
    r.counter<{ a: string }>({ name: "empty_total", help: "E.", labelNames: ["a"] });
    r.counter<{ outcome: string }>({
      name: "jobs_total",
      help: "J.",
      labelNames: ["outcome"],
      initLabels: [{ outcome: "ok" }, { outcome: "failed" }],
    });
    const text = r.render();
    expect(text).toContain("# HELP empty_total E.\n# TYPE empty_total counter\n# HELP jobs_total");
    const p = parseExposition(text);
    expect(p.families.get("empty_total")?.samples).toEqual([]);
    expect(sampleValue(p, "jobs_total", { outcome: "ok" })).toBe(0);
    expect(sampleValue(p, "jobs_total", { outcome: "failed" })).toBe(0);
  });

  test("unlabelled metrics show 0 from the start", () => {
    const r = new Registry();
    r.counter({ name: "a_total", help: "A." });
    r.gauge({ name: "b", help: "B." });
    r.histogram({ name: "c_seconds", help: "C.", buckets: [1] });
    const p = parseExposition(r.render());
    expect(sampleValue(p, "a_total")).toBe(0);
    expect(sampleValue(p, "b")).toBe(0);
    expect(sampleValue(p, "c_seconds_count")).toBe(0);
    expect(sampleValue(p, "c_seconds_bucket", { le: "+Inf" })).toBe(0);
  });

  test("label values escape backslash, quote and newline and parse back intact", () => {
    const r = new Registry();
    const g = r.gauge<{ v: string }>({ name: "g", help: "G.", labelNames: ["v"] });
    const nasty = 'a\\b"c\nd';
    g.set({ v: nasty }, 1);
    const text = r.render();
    expect(text).toContain('g{v="a\\\\b\\"c\\nd"} 1\n');
    expect(sampleValue(parseExposition(text), "g", { v: nasty })).toBe(1);
  });

  test("HELP escapes backslash and newline", () => {
    const r = new Registry();
    r.gauge({ name: "g", help: 'line1\nline2 with \\ and "quotes"' });
    const text = r.render();
    expect(text).toStartWith('# HELP g line1\\nline2 with \\\\ and "quotes"\n');
    expect(parseExposition(text).families.get("g")?.help).toBe('line1\nline2 with \\ and "quotes"');
  });

  test("families sorted by name, series by label values in label order, stable across renders", () => {
    const r = new Registry();
    const z = r.counter<{ b: string; a: string }>({ name: "zz_total", help: "Z.", labelNames: ["b", "a"] });
    r.gauge({ name: "aa", help: "A." });
    z.inc({ b: "2", a: "x" });
    z.inc({ b: "1", a: "y" });
    z.inc({ b: "1", a: "a" });
    const text = r.render();
    expect(text.indexOf("# HELP aa")).toBeLessThan(text.indexOf("# HELP zz_total"));
    const lines = text.split("\n").filter((l) => l.startsWith("zz_total{"));
    expect(lines).toEqual(['zz_total{b="1",a="a"} 1', 'zz_total{b="1",a="y"} 1', 'zz_total{b="2",a="x"} 1']);
    expect(r.render()).toBe(text);
  });

  test("gauge set/inc/dec and a collect callback run at every render", () => {
    const r = new Registry();
    const g = r.gauge({ name: "g", help: "G." });
    g.set({}, 5);
    g.inc({}, 2);
    g.dec({});
    expect(sampleValue(parseExposition(r.render()), "g")).toBe(6);
    let n = 0;
    r.gauge({ name: "live", help: "L.", collect: (gg) => gg.set({}, ++n) });
    expect(sampleValue(parseExposition(r.render()), "live")).toBe(1);
    expect(sampleValue(parseExposition(r.render()), "live")).toBe(2);
  });

  test("special values render as +Inf, -Inf, NaN", () => {
    expect(formatValue(Infinity)).toBe("+Inf");
    expect(formatValue(-Infinity)).toBe("-Inf");
    expect(formatValue(NaN)).toBe("NaN");
    expect(formatValue(0.25)).toBe("0.25");
    const r = new Registry();
    const g = r.gauge<{ k: string }>({ name: "g", help: "G.", labelNames: ["k"] });
    g.set({ k: "a" }, Infinity);
    g.set({ k: "b" }, NaN);
    g.set({ k: "c" }, 1e-7);
    const p = parseExposition(r.render());
    expect(sampleValue(p, "g", { k: "a" })).toBe(Infinity);
    expect(sampleValue(p, "g", { k: "b" })).toBeNaN();
    expect(sampleValue(p, "g", { k: "c" })).toBe(1e-7);
  });
});

describe("Histogram", () => {
  test("cumulative buckets including +Inf, _sum and _count; boundary values count as <= le", () => {
    const r = new Registry();
    const h = r.histogram<{ kind: string }>({ name: "wait_seconds", help: "W.", labelNames: ["kind"], buckets: [0.1, 1, 10] });
    for (const v of [0.05, 0.1, 0.5, 1, 20]) h.observe({ kind: "llm" }, v);
    const text = r.render();
    expect(text).toBe(
      [
        "# HELP wait_seconds W.",
        "# TYPE wait_seconds histogram",
        'wait_seconds_bucket{kind="llm",le="0.1"} 2',
        'wait_seconds_bucket{kind="llm",le="1"} 4',
        'wait_seconds_bucket{kind="llm",le="10"} 4',
        'wait_seconds_bucket{kind="llm",le="+Inf"} 5',
        'wait_seconds_sum{kind="llm"} 21.65',
        'wait_seconds_count{kind="llm"} 5',
        "",
      ].join("\n"),
    );
    parseExposition(text); // the strict parser's histogram checks hold
    expect(h.get({ kind: "llm" })).toEqual({ count: 5, sum: 21.65 });
  });

  test("many random observations keep the exposition consistent", () => {
    const r = new Registry();
    const h = r.histogram<{ k: string }>({ name: "h", help: "H.", labelNames: ["k"], buckets: [0.001, 0.01, 0.1, 1, 10, 100] });
    let seed = 42;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let i = 0; i < 2000; i++) h.observe({ k: rnd() < 0.5 ? "a" : "b" }, rnd() ** 4 * 300);
    const p = parseExposition(r.render());
    expect((sampleValue(p, "h_count", { k: "a" }) ?? 0) + (sampleValue(p, "h_count", { k: "b" }) ?? 0)).toBe(2000);
  });

  test("NaN observations are dropped instead of poisoning _sum", () => {
    const h = new Histogram({ name: "h", help: "H.", buckets: [1] });
    h.observe({}, NaN);
    h.observe({}, 0.5);
    expect(h.get({})).toEqual({ count: 1, sum: 0.5 });
  });

  test("rejects bad buckets and a le label", () => {
    expect(() => new Histogram({ name: "h", help: "H.", buckets: [] })).toThrow();
    expect(() => new Histogram({ name: "h", help: "H.", buckets: [1, 1] })).toThrow();
    expect(() => new Histogram({ name: "h", help: "H.", buckets: [2, 1] })).toThrow();
    expect(() => new Histogram({ name: "h", help: "H.", buckets: [1, Infinity] })).toThrow();
    expect(() => new Histogram<{ le: string }>({ name: "h", help: "H.", labelNames: ["le"], buckets: [1] })).toThrow(/reserved/);
  });
});

describe("programming errors fail loudly", () => {
  test("invalid names, duplicate registration, wrong labels, negative counter increments", () => {
    expect(() => new Counter({ name: "bad-name", help: "x" })).toThrow(/invalid metric name/);
    expect(() => new Counter<{ "a-b": string }>({ name: "c", help: "x", labelNames: ["a-b"] })).toThrow(/invalid label name/);
    expect(() => new Counter<{ __x: string }>({ name: "c", help: "x", labelNames: ["__x"] })).toThrow(/invalid label name/);
    const r = new Registry();
    r.gauge({ name: "g", help: "x" });
    expect(() => r.gauge({ name: "g", help: "x" })).toThrow(/twice/);
    const c = new Counter<{ a: string }>({ name: "c", help: "x", labelNames: ["a"] });
    expect(() => c.inc({} as { a: string })).toThrow(/do not match/);
    expect(() => c.inc({ a: "1", b: "2" } as { a: string })).toThrow(/do not match/);
    expect(() => c.inc({ a: "1" }, -1)).toThrow();
    const g = new Gauge<{ a: string }>({ name: "g", help: "x", labelNames: ["a"] });
    expect(() => g.set({ a: 1 as unknown as string }, 1)).toThrow(/string/);
  });
});
