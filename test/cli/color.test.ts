import { describe, expect, test } from "bun:test";
import { stripColor, useColor } from "../../src/runtime/color.ts";

const tty = { isTTY: true };
const pipe = { isTTY: false };

describe("useColor", () => {
  test("a terminal gets colour, a pipe or file does not", () => {
    expect(useColor(tty, {})).toBe(true);
    expect(useColor(pipe, {})).toBe(false);
    expect(useColor({}, {})).toBe(false);
  });

  test("NO_COLOR with any non-empty value, or TERM=dumb, turns it off on a terminal (no-color.org)", () => {
    for (const v of ["1", "0", "true", "yes"]) expect(useColor(tty, { NO_COLOR: v })).toBe(false);
    expect(useColor(tty, { NO_COLOR: "" })).toBe(true);
    expect(useColor(tty, { TERM: "dumb" })).toBe(false);
  });

  test("FORCE_COLOR turns it on anywhere and wins over NO_COLOR, as in Node; 0 or false turns it off", () => {
    expect(useColor(pipe, { FORCE_COLOR: "1" })).toBe(true);
    expect(useColor(pipe, { FORCE_COLOR: "" })).toBe(true);
    expect(useColor(pipe, { FORCE_COLOR: "1", NO_COLOR: "1", TERM: "dumb" })).toBe(true);
    expect(useColor(tty, { FORCE_COLOR: "0" })).toBe(false);
    expect(useColor(tty, { FORCE_COLOR: "false" })).toBe(false);
  });
});

test("stripColor removes SGR sequences and nothing else", () => {
  expect(stripColor("\x1b[4m\x1b[1mUSAGE\x1b[22m\x1b[24m \x1b[36mgpu-turnstile\x1b[39m [x]")).toBe("USAGE gpu-turnstile [x]");
});
