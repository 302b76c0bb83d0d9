import { beforeAll, describe, expect, test } from "bun:test";
import { type Exposition, ExpositionError, parseExposition, sampleValue } from "../support/prom-parse.ts";

const VALID = `# HELP http_requests_total Requests by code. A "quote" and a \\\\ backslash\\nnext line
# TYPE http_requests_total counter
http_requests_total{code="200",path="/a\\"b\\\\c\\nd"} 1027 1395066363000
http_requests_total{code="400",path="/"} 3
# a plain comment

# TYPE temp gauge
# HELP temp Temperature.
temp -3.5e2
# HELP lat Latency.
# TYPE lat histogram
lat_bucket{kind="llm",le="0.1"} 1
lat_bucket{kind="llm",le="1"} 3
lat_bucket{kind="llm",le="+Inf"} 4
lat_sum{kind="llm"} 7.25
lat_count{kind="llm"} 4
lat_bucket{kind="image",le="0.1"} 0
lat_bucket{kind="image",le="1"} 0
lat_bucket{kind="image",le="+Inf"} 0
lat_sum{kind="image"} 0
lat_count{kind="image"} 0
# HELP q A summary.
# TYPE q summary
q{quantile="0.5"} NaN
q_sum 0
q_count 0
# HELP weird Inf values and a trailing comma.
# TYPE weird gauge
weird{a="x",} +Inf
weird{a="y"} -Inf
`;

describe("parseExposition accepts valid text", () => {
  let p: Exposition;
  beforeAll(() => {
    p = parseExposition(VALID);
  });

  test("families, types and help", () => {
    expect([...p.families.keys()]).toEqual(["http_requests_total", "temp", "lat", "q", "weird"]);
    expect(p.families.get("http_requests_total")?.type).toBe("counter");
    expect(p.families.get("http_requests_total")?.help).toBe('Requests by code. A "quote" and a \\ backslash\nnext line');
    expect(p.families.get("lat")?.type).toBe("histogram");
    expect(p.families.get("lat")?.samples).toHaveLength(10);
    expect(p.families.get("q")?.type).toBe("summary");
  });

  test("label escapes, values and timestamps", () => {
    const s = p.families.get("http_requests_total")?.samples[0];
    expect(s?.labels).toEqual({ code: "200", path: '/a"b\\c\nd' });
    expect(s?.value).toBe(1027);
    expect(s?.timestamp).toBe(1395066363000);
    expect(sampleValue(p, "temp")).toBe(-350);
    expect(sampleValue(p, "weird", { a: "x" })).toBe(Infinity);
    expect(sampleValue(p, "weird", { a: "y" })).toBe(-Infinity);
    expect(sampleValue(p, "q", { quantile: "0.5" })).toBeNaN();
  });

  test("sampleValue matches labels exactly", () => {
    expect(sampleValue(p, "lat_count", { kind: "llm" })).toBe(4);
    expect(sampleValue(p, "lat_bucket", { kind: "llm", le: "1" })).toBe(3);
    expect(sampleValue(p, "lat_count")).toBeUndefined();
    expect(sampleValue(p, "lat_count", { kind: "llm", extra: "x" })).toBeUndefined();
    expect(sampleValue(p, "nope")).toBeUndefined();
  });

  test("empty input is an empty exposition", () => {
    expect(parseExposition("").families.size).toBe(0);
  });

  test("untyped samples are allowed only when asked", () => {
    expect(() => parseExposition("x 1\n")).toThrow(ExpositionError);
    const p2 = parseExposition("x 1\n", { requireHelpAndType: false });
    expect(p2.families.get("x")?.type).toBe("untyped");
  });
});

const H = "# HELP h h.\n# TYPE h histogram\n";
const C = "# HELP c c.\n# TYPE c counter\n";
const G = "# HELP g g.\n# TYPE g gauge\n";

/** [why, text, line the error must name] */
const BROKEN: [string, string, number][] = [
  ["no final newline", `${G}g 1`, 3],
  ["CRLF line ends", `# HELP g g.\r\n# TYPE g gauge\n g 1\n`, 1],
  ["sample before TYPE", `g 1\n# HELP g g.\n# TYPE g gauge\n`, 1],
  ["sample without HELP", `# TYPE g gauge\ng 1\n`, 2],
  ["TYPE after samples", `# HELP g g.\ng 1\n# TYPE g gauge\n`, 2],
  ["second TYPE", `${G}# TYPE g gauge\ng 1\n`, 3],
  ["second HELP", `${G}# HELP g again\ng 1\n`, 3],
  ["unknown type", `# HELP g g.\n# TYPE g meter\n`, 2],
  ["invalid name in TYPE", `# HELP 1g g.\n`, 1],
  ["invalid metric name", `${G}g-x 1\n`, 3],
  ["invalid label name", `${G}g{1a="x"} 1\n`, 3],
  ["reserved label name", `${G}g{__a="x"} 1\n`, 3],
  ["duplicate label", `${G}g{a="x",a="y"} 1\n`, 3],
  ["unquoted label value", `${G}g{a=x} 1\n`, 3],
  ["unterminated label value", `${G}g{a="x} 1\n`, 3],
  ["bad escape in label value", `${G}g{a="x\\t"} 1\n`, 3],
  ["bad escape in HELP", `# HELP g tab\\t\n# TYPE g gauge\n`, 1],
  ["missing comma between labels", `${G}g{a="x" b="y"} 1\n`, 3],
  ["missing value", `${G}g{a="x"}\n`, 3],
  ["non-numeric value", `${G}g one\n`, 3],
  ["lower-case inf", `${G}g inf\n`, 3],
  ["hex value", `${G}g 0x10\n`, 3],
  ["float timestamp", `${G}g 1 1.5\n`, 3],
  ["trailing garbage", `${G}g 1 2 3\n`, 3],
  ["duplicate series", `${G}g{a="x"} 1\ng{a="x"} 2\n`, 4],
  ["family not contiguous", `${G}g 1\n${C}c 1\ng{a="b"} 2\n`, 7],
  ["negative counter", `${C}c -1\n`, 3],
  ["NaN counter", `${C}c NaN\n`, 3],
  ["histogram sample without suffix", `${H}h 1\n`, 3],
  ["bucket without le", `${H}h_bucket 1\nh_sum 0\nh_count 1\n`, 3],
  ["bucket with bad le", `${H}h_bucket{le="x"} 1\n`, 3],
  ["le on _sum", `${H}h_bucket{le="+Inf"} 1\nh_sum{le="1"} 0\n`, 4],
  ["no +Inf bucket", `${H}h_bucket{le="1"} 1\nh_sum 0\nh_count 1\n`, 3],
  ["buckets not cumulative", `${H}h_bucket{le="1"} 2\nh_bucket{le="2"} 1\nh_bucket{le="+Inf"} 2\nh_sum 0\nh_count 2\n`, 4],
  ["le not ascending", `${H}h_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_sum 0\nh_count 1\n`, 4],
  ["_count != +Inf bucket", `${H}h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 0\nh_count 3\n`, 6],
  ["missing _sum", `${H}h_bucket{le="+Inf"} 2\nh_count 2\n`, 3],
  ["missing _count", `${H}h_bucket{le="+Inf"} 2\nh_sum 2\n`, 3],
  ["one of two series inconsistent", `${H}h_bucket{k="a",le="+Inf"} 1\nh_sum{k="a"} 0\nh_count{k="a"} 1\nh_bucket{k="b",le="+Inf"} 1\nh_sum{k="b"} 0\nh_count{k="b"} 2\n`, 8],
  ["HELP for a histogram's derived name", `${H}# HELP h_count x\n`, 3],
  ["summary quantile sample without quantile", `# HELP s s.\n# TYPE s summary\ns 1\n`, 3],
];

describe("parseExposition rejects broken input with the line number", () => {
  for (const [why, text, line] of BROKEN) {
    test(why, () => {
      let err: unknown;
      try {
        parseExposition(text);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ExpositionError);
      expect((err as ExpositionError).line).toBe(line);
      expect((err as ExpositionError).message).toStartWith(`line ${line}: `);
    });
  }
});
