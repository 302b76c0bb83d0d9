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

describe("the log's colour choice (wantColor)", () => {
  // process.stderr is built on first use, which costs a compiled start ~10 ms; the log writes to
  // fd 2 itself, so the choice must not build it.
  test("follows the environment and the terminal on fd 2 without touching process.stderr", async () => {
    const { wantColor } = await import("../../src/cli/serve.ts");
    const { isatty } = await import("node:tty");
    const saved = Object.getOwnPropertyDescriptor(process, "stderr")!;
    let touched = 0;
    Object.defineProperty(process, "stderr", { configurable: true, get: () => (touched++, saved.get ? saved.get.call(process) : saved.value) });
    try {
      expect(wantColor({ NO_COLOR: "1" })).toBe(false);
      expect(wantColor({ FORCE_COLOR: "1" })).toBe(true);
      expect(wantColor({ TERM: "dumb" })).toBe(false);
      expect(wantColor({})).toBe(isatty(2));
    } finally {
      Object.defineProperty(process, "stderr", saved);
    }
    expect(touched).toBe(0);
  });
});
