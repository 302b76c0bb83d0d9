import { describe, expect, test } from "bun:test";
import { DurationError, formatDuration, parseDuration } from "../../src/config/duration.ts";

describe("parseDuration", () => {
  const ok: Array<[string, number]> = [
    ["0", 0],
    ["0s", 0],
    ["500ms", 500],
    ["60s", 60_000],
    ["15m", 900_000],
    ["6h", 21_600_000],
    ["1h30m", 5_400_000],
    ["1h30m15s", 5_415_000],
    ["2m30.5s", 150_500],
    ["1.5s", 1500],
    [".5s", 500],
    ["1.s", 1000],
    ["1.1s", 1100],
    ["1.5h", 5_400_000],
    ["1000ns", 0.001],
    ["1ns", 0.000001],
    ["250us", 0.25],
    ["250\u00b5s", 0.25], // micro sign
    ["250\u03bcs", 0.25], // greek mu
    ["1m0s", 60_000],
    ["+5s", 5000],
    ["  10s  ", 10_000],
    ["3h0m0.001s", 10_800_001],
  ];
  for (const [text, ms] of ok) {
    test(`${JSON.stringify(text)} → ${ms} ms`, () => expect(parseDuration(text)).toBe(ms));
  }

  const bad: Array<[string, RegExp]> = [
    ["", /empty/],
    ["   ", /empty/],
    ["10", /missing unit/],
    ["1h30", /missing unit/],
    ["-5s", /negative/],
    ["-0", /negative/],
    ["5 s", /unknown unit " s"/],
    ["1h 30m", /unknown unit "h "/],
    ["5sec", /unknown unit "sec"/],
    ["5d", /unknown unit "d"/],
    ["s", /invalid/],
    [".s", /invalid/],
    ["+", /invalid/],
    ["abc", /invalid/],
    ["1..5s", /invalid/],
    ["3000000h", /too large/],
  ];
  for (const [text, why] of bad) {
    test(`rejects ${JSON.stringify(text)}`, () => {
      expect(() => parseDuration(text)).toThrow(DurationError);
      expect(() => parseDuration(text)).toThrow(why);
    });
  }
});

describe("formatDuration renders like Go's Duration.String", () => {
  const table: Array<[number, string]> = [
    [0, "0s"],
    [0.000001, "1ns"],
    [0.0015, "1.5\u00b5s"],
    [0.25, "250\u00b5s"],
    [1.5, "1.5ms"],
    [500, "500ms"],
    [1000, "1s"],
    [1500, "1.5s"],
    [30_000, "30s"],
    [60_000, "1m0s"],
    [90_000, "1m30s"],
    [600_000, "10m0s"],
    [3_600_000, "1h0m0s"],
    [5_400_000, "1h30m0s"],
    [5_415_500, "1h30m15.5s"],
    [21_600_000, "6h0m0s"],
    [2 ** 31 - 1, "596h31m23.647s"],
    [-1500, "-1.5s"],
  ];
  for (const [ms, text] of table) test(`${ms} ms → ${text}`, () => expect(formatDuration(ms)).toBe(text));

  test("round-trips every string it produces", () => {
    for (const [ms] of table.filter(([ms]) => ms >= 0)) expect(parseDuration(formatDuration(ms))).toBe(ms);
  });
});
