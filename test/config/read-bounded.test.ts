/** Every file the program reads in one piece has a bound (issue 26: a 300 MiB lease file was read whole at start). */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync, ftruncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CONFIG_FILE_MAX_BYTES, ConfigError, defaultReadFile, loadConfig } from "../../src/config/load.ts";
import { FileTooLargeError, readTextBounded } from "../../src/config/read-bounded.ts";

let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), "read-bounded-"))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A file of `size` bytes that costs no disk (sparse: zeros). */
function sparse(name: string, size: number): string {
  const path = join(dir, name);
  const fd = openSync(path, "w");
  ftruncateSync(fd, size);
  closeSync(fd);
  return path;
}

test("a file up to the bound is read whole; one byte more is refused, naming the file and the bound", () => {
  const path = join(dir, "a.txt");
  writeFileSync(path, "é".repeat(512)); // 1024 bytes
  expect(readTextBounded(path, 1024)).toBe("é".repeat(512));
  expect(() => readTextBounded(path, 1023)).toThrow(new FileTooLargeError(path, 1023));
  expect(new FileTooLargeError(path, 64 << 10).message).toBe(`${path} is larger than 64 KiB, the most gpu-turnstile reads of such a file`);
  expect(() => readTextBounded(join(dir, "none"), 10)).toThrow(/ENOENT/);
});

test("a device that never ends is cut at the bound", () => {
  expect(() => readTextBounded("/dev/zero", 1 << 20)).toThrow(FileTooLargeError);
});

test("a 300 MiB config file is a config error naming it, not 300 MiB read", () => {
  const path = sparse("gpu-turnstile.env", 300 << 20);
  expect(() => defaultReadFile(path)).toThrow(FileTooLargeError);
  let err: unknown;
  try {
    loadConfig({ argvConfigPath: path, env: {}, execPath: "/usr/local/bin/gpu-turnstile" });
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ConfigError);
  expect((err as Error).message).toBe(`config error: config file ${path} is larger than ${CONFIG_FILE_MAX_BYTES >> 20} MiB, the most gpu-turnstile reads of such a file`);
});
