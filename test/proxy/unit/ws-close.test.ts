import { describe, expect, test } from "bun:test";
import { closeActionFor } from "../../../src/proxy/ws-close.ts";

const utf8 = (s: string) => new TextEncoder().encode(s).length;

describe("reserved codes are never sent", () => {
  test("1005 (no status) becomes a close without a code", () => {
    expect(closeActionFor(1005, "")).toEqual({ kind: "close" });
  });

  test.each([1006, 1015])("%i becomes an abrupt termination", (code) => {
    expect(closeActionFor(code, "whatever")).toEqual({ kind: "terminate" });
  });

  test("1004 becomes 1011 with the original code in the reason", () => {
    expect(closeActionFor(1004, "odd")).toEqual({ kind: "close", code: 1011, reason: "upstream closed with 1004: odd" });
    expect(closeActionFor(1004, "")).toEqual({ kind: "close", code: 1011, reason: "upstream closed with 1004" });
  });

  test.each([0, 999, 1016, 2000, 2999, 5000, 65535, -1])("out-of-range %i becomes 1011", (code) => {
    const a = closeActionFor(code, "");
    expect(a).toEqual({ kind: "close", code: 1011, reason: `upstream closed with ${code}` });
  });
});

describe("sendable codes pass with their reason", () => {
  test.each([1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014])("%i", (code) => {
    expect(closeActionFor(code, "bye")).toEqual({ kind: "close", code, reason: "bye" });
  });

  test.each([3000, 3999, 4000, 4999])("application code %i", (code) => {
    expect(closeActionFor(code, "")).toEqual({ kind: "close", code, reason: "" });
  });
});

describe("reason truncation to 123 UTF-8 bytes", () => {
  test("123 bytes pass whole, 124 are cut to 123", () => {
    const ok = "a".repeat(123);
    expect(closeActionFor(1000, ok)).toEqual({ kind: "close", code: 1000, reason: ok });
    expect(closeActionFor(1000, "a".repeat(124))).toEqual({ kind: "close", code: 1000, reason: ok });
  });

  test.each([
    ["2-byte", "é"],
    ["3-byte", "€"],
    ["4-byte", "😀"],
  ])("a %s character straddling byte 123 is dropped whole", (_name, ch) => {
    // 122 ASCII bytes, then a character that would end past byte 123.
    const reason = "a".repeat(122) + ch + "tail";
    const a = closeActionFor(1000, reason);
    if (a.kind !== "close") throw new Error("expected close");
    expect(a.reason).toBe("a".repeat(122));
    expect(a.reason!.includes("\uFFFD")).toBe(false);
  });

  test("a character ending exactly at byte 123 is kept", () => {
    const reason = "a".repeat(120) + "€" + "b";
    const a = closeActionFor(1000, reason);
    if (a.kind !== "close") throw new Error("expected close");
    expect(a.reason).toBe("a".repeat(120) + "€");
    expect(utf8(a.reason!)).toBe(123);
  });

  test("all-multibyte reasons stay within the limit and decode cleanly", () => {
    const a = closeActionFor(4000, "日本語".repeat(50));
    if (a.kind !== "close") throw new Error("expected close");
    expect(utf8(a.reason!)).toBe(123);
    expect(a.reason).toBe("日本語".repeat(50).slice(0, 41));
  });

  test("the 1011 rewrite is truncated too", () => {
    const a = closeActionFor(2500, "x".repeat(200));
    if (a.kind !== "close") throw new Error("expected close");
    expect(a.code).toBe(1011);
    expect(utf8(a.reason!)).toBeLessThanOrEqual(123);
    expect(a.reason!.startsWith("upstream closed with 2500: x")).toBe(true);
  });
});
