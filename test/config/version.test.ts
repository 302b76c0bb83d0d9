import { expect, test } from "bun:test";
import { compareVersions, parseVersion } from "../../src/config/version.ts";

test("compareVersions compares numerically", () => {
  expect(compareVersions("v1.10.0", "v1.9.0")).toBe(1);
  expect(compareVersions("v1.9.9", "v1.10.0")).toBe(-1);
  expect(compareVersions("v2.0.0", "v2.0.0")).toBe(0);
  expect(compareVersions("v0.0.0", "v0.0.1")).toBe(-1);
  expect(compareVersions("v1.0.10", "v1.0.9")).toBe(1);
});

test("only vX.Y.Z is a version", () => {
  expect(parseVersion("v1.2.3")).toEqual([1, 2, 3]);
  for (const bad of ["1.2.3", "v1.2", "v1.2.3-rc1", "v01.2.3", "V1.2.3", "", "stable", " v1.2.3"]) {
    expect(parseVersion(bad)).toBeNull();
  }
  expect(() => compareVersions("v1.2", "v1.2.3")).toThrow(/not a vX.Y.Z version: "v1.2"/);
});
