/**
 * Reads a text file the program did not write itself in one piece, but never more than a bound:
 * a config file, a kept lease or a unit file someone filled with 300 MiB (issue 26) costs an error
 * naming the file, not the process's memory at start. Read in pieces up to one byte past the bound,
 * so a file that grows while it is read, or a device that never ends, is cut there as well.
 */
import { closeSync, openSync, readSync } from "node:fs";

export class FileTooLargeError extends Error {
  override name = "FileTooLargeError";
  constructor(
    readonly path: string,
    readonly limitBytes: number,
  ) {
    super(`${path} is larger than ${shownSize(limitBytes)}, the most gpu-turnstile reads of such a file`);
  }
}

function shownSize(n: number): string {
  return n % (1 << 20) === 0 ? `${n >> 20} MiB` : n % 1024 === 0 ? `${n >> 10} KiB` : `${n} bytes`;
}

/** The file's text (UTF-8), or throws FileTooLargeError past `maxBytes`; other errors are fs's own (ENOENT…). */
export function readTextBounded(path: string, maxBytes: number): string {
  const fd = openSync(path, "r");
  try {
    const buf = Buffer.allocUnsafe(Math.min(maxBytes + 1, 64 << 10));
    const parts: Buffer[] = [];
    let size = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      size += n;
      if (size > maxBytes) throw new FileTooLargeError(path, maxBytes);
      parts.push(Buffer.from(buf.subarray(0, n)));
    }
    return Buffer.concat(parts, size).toString("utf8");
  } finally {
    closeSync(fd);
  }
}
