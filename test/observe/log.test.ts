import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger, log, setLogger, type LoggerOptions } from "../../src/observe/log.ts";

const T = new Date("2026-12-02T16:01:29.123Z");
const dir = mkdtempSync(join(tmpdir(), "gt-log-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function capture(opts: Partial<LoggerOptions> = {}) {
  const lines: string[] = [];
  const logger = createLogger({ level: "debug", format: "text", now: () => T, stream: { write: (s: string) => lines.push(s) }, ...opts });
  return { logger, lines };
}

function connRefused(): Error {
  const e = new Error("Unable to connect. Is the computer able to access the url?");
  (e as Error & { code: string }).code = "ConnectionRefused";
  return e;
}

describe("text format", () => {
  test("one greppable line: time, padded level, message, key=value fields", () => {
    const { logger, lines } = capture();
    logger.warn("upstream down", { upstream: "ollama", reason: "connection refused", attempts: 3, ok: false, empty: "", gone: undefined });
    logger.error("x");
    expect(lines).toEqual([
      '2026-12-02T16:01:29.123Z WARN  upstream down upstream=ollama reason="connection refused" attempts=3 ok=false empty=""\n',
      "2026-12-02T16:01:29.123Z ERROR x\n",
    ]);
  });

  test("values with quotes, equals signs or newlines are JSON-quoted; objects are JSON", () => {
    const { logger, lines } = capture();
    logger.info("m", { a: 'say "hi"', b: "k=v", c: "two\nlines", d: { x: [1, 2] }, e: null, f: 10n });
    expect(lines[0]).toBe(
      '2026-12-02T16:01:29.123Z INFO  m a="say \\"hi\\"" b="k=v" c="two\\nlines" d="{\\"x\\":[1,2]}" e=– f=10\n',
    );
  });

  test("a message with a newline or control characters stays one inert line", () => {
    const { logger, lines } = capture();
    logger.info("first\nsecond");
    logger.info("GET /\x1b[2Jx\r\n2026-01-01T00:00:00.000Z ERROR forged", { path: "/\x1b[2J" });
    expect(lines).toEqual([
      "2026-12-02T16:01:29.123Z INFO  first\\nsecond\n",
      '2026-12-02T16:01:29.123Z INFO  GET /\\x1b[2Jx\\n2026-01-01T00:00:00.000Z ERROR forged path="/\\u001b[2J"\n',
    ]);
  });

  test("no colour unless asked; colour only in text to a stream", () => {
    const plain = capture({ color: false });
    plain.logger.warn("w", { k: "v" });
    expect(plain.lines[0]).not.toContain("\x1b[");
    expect(plain.logger.color).toBe(false);

    const coloured = capture({ color: true });
    coloured.logger.warn("w", { k: "v" });
    expect(coloured.lines[0]).toContain("\x1b[33mWARN ");
    expect(coloured.logger.color).toBe(true);

    const json = capture({ color: true, format: "json" });
    json.logger.warn("w", { k: "v" });
    expect(json.lines[0]).not.toContain("\x1b[");
    expect(json.logger.color).toBe(false);
  });
});

describe("json format", () => {
  test("exactly one object per line: time, level, msg, then fields", () => {
    const { logger, lines } = capture({ format: "json" });
    logger.info("image job done", { prompt_id: "abc", job: "12.3s", n: 2 });
    logger.warn("multi\nline", { time: "clash", msg: "clash2" });
    expect(lines).toHaveLength(2);
    for (const l of lines) {
      expect(l.endsWith("\n")).toBe(true);
      expect(l.slice(0, -1)).not.toContain("\n");
    }
    expect(lines[0]).toBe('{"time":"2026-12-02T16:01:29.123Z","level":"info","msg":"image job done","prompt_id":"abc","job":"12.3s","n":2}\n');
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    logger.error("odd fields", { cyclic, nested: { err: new Error("boom") } });
    expect(JSON.parse(lines[2] as string)).toMatchObject({ msg: "odd fields", cyclic: "[object Object]", nested: { err: "boom" } });
    // A field named like a fixed key cannot overwrite it.
    expect(JSON.parse(lines[1] as string)).toEqual({
      time: "2026-12-02T16:01:29.123Z",
      level: "warn",
      msg: "multi\nline",
      _time: "clash",
      _msg: "clash2",
    });
  });
});

describe("empty values", () => {
  test("an empty value is null in JSON and a dash people read as none in text, never \"-\"", () => {
    const text = capture();
    const json = capture({ format: "json" });
    for (const { logger } of [text, json]) logger.warn("force-release by 127.0.0.1", { lease: null, jobs_interrupted: null, llm_cut: 0 });
    expect(text.lines[0]).toContain(" lease=– jobs_interrupted=– llm_cut=0");
    expect(JSON.parse(json.lines[0] as string)).toMatchObject({ lease: null, jobs_interrupted: null, llm_cut: 0 });
  });
});

describe("levels", () => {
  test("each level lets through itself and the ones above", () => {
    const written: Record<string, string[]> = {};
    for (const level of ["debug", "info", "warn", "error"] as const) {
      const { logger, lines } = capture({ level, format: "json" });
      logger.debug("d");
      logger.info("i");
      logger.warn("w");
      logger.error("e");
      written[level] = lines.map((l) => (JSON.parse(l) as { msg: string }).msg);
      expect(logger.enabled("warn")).toBe(level !== "error");
    }
    expect(written).toEqual({ debug: ["d", "i", "w", "e"], info: ["i", "w", "e"], warn: ["w", "e"], error: ["e"] });
  });

  test("identical lines in a burst are all written (consola's throttling is off)", () => {
    const { logger, lines } = capture();
    for (let i = 0; i < 25; i++) logger.info("--> GET /api/tags");
    expect(lines).toHaveLength(25);
  });

  test("child loggers add their fields; call-site fields win", () => {
    const { logger, lines } = capture();
    const child = logger.child({ prompt_id: "p1", phase: "wait" }).child({ listener: "comfy" });
    child.info("phase", { phase: "free" });
    expect(lines[0]).toBe("2026-12-02T16:01:29.123Z INFO  phase prompt_id=p1 phase=free listener=comfy\n");
  });
});

describe("errors as fields", () => {
  test("an Error prints its message and code on one line, no stack", () => {
    const { logger, lines } = capture({ level: "info" });
    const err = connRefused();
    logger.warn("probe failed", { upstream: "comfy", err });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe(
      '2026-12-02T16:01:29.123Z WARN  probe failed upstream=comfy err="Unable to connect. Is the computer able to access the url? (ConnectionRefused)"\n',
    );
    expect(lines[0]).not.toContain(" at ");
  });

  test("the cause is included; in JSON the error is a string too", () => {
    const { logger, lines } = capture({ level: "warn", format: "json" });
    logger.error("fetch failed", { err: new Error("fetch failed", { cause: new Error("socket hang up") }) });
    expect(JSON.parse(lines[0] as string).err).toBe("fetch failed: socket hang up");
    expect(lines[0]).not.toContain("stack");
  });

  test("at debug the stack comes as a separate, still one-line field", () => {
    const { logger, lines } = capture({ level: "debug" });
    logger.warn("probe failed", { err: connRefused() });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(" err_stack=\"Error: Unable to connect");
    expect(lines[0]?.slice(0, -1)).not.toContain("\n");
  });
});

describe("credentials in URLs never reach a line", () => {
  const secret = "S3cretPW";
  const url = `http://admin:${secret}@gpu.lan:11435/`;
  const err = Object.assign(new Error(`fetch ${url}api/tags failed`), { code: "ConnectionRefused" });

  for (const format of ["text", "json"] as const) {
    test(`${format}: in the message, a field, a nested field and an error (with its stack at debug)`, () => {
      const { logger, lines } = capture({ format });
      logger.info(`upstream ${url}`, { upstream: url, nested: { to: url }, err });
      const out = lines.join("");
      expect(out).not.toContain(secret);
      expect(out).not.toContain("admin");
      expect(out).toContain("http://***@gpu.lan:11435/");
    });
  }
});

describe("LOG_FILE", () => {
  test("creates nested folders, appends, never colours", () => {
    const file = join(dir, "a", "b", "c", "turnstile.log");
    const first = createLogger({ level: "info", format: "text", file, color: true, now: () => T });
    first.info("one", { k: 1 });
    first.close();
    const second = createLogger({ level: "info", format: "text", file, color: true, now: () => T });
    second.warn("two");
    second.close();
    expect(readFileSync(file, "utf8")).toBe("2026-12-02T16:01:29.123Z INFO  one k=1\n2026-12-02T16:01:29.123Z WARN  two\n");
    expect(second.color).toBe(false);
  });

  test.skipIf(process.platform === "win32")("created 0640; an existing world-readable one is tightened", () => {
    const file = join(dir, "modes", "turnstile.log");
    createLogger({ level: "info", format: "text", file }).close();
    expect(statSync(file).mode & 0o777).toBe(0o640);
    chmodSync(file, 0o644);
    createLogger({ level: "info", format: "text", file }).close();
    expect(statSync(file).mode & 0o777).toBe(0o640);
  });

  test("a file that cannot be opened is a clear error naming the path and the reason", () => {
    const asDir = join(dir, "is-a-dir");
    createLogger({ level: "info", format: "text", file: join(asDir, "x.log") }).close();
    expect(() => createLogger({ level: "info", format: "text", file: asDir })).toThrow(
      new RegExp(`^cannot open log file ${asDir}: .*EISDIR`),
    );
    const aFile = join(dir, "plain-file");
    writeFileSync(aFile, "");
    const under = join(aFile, "sub", "x.log");
    expect(() => createLogger({ level: "info", format: "text", file: under })).toThrow(
      new RegExp(`^cannot open log file ${under}: .*(ENOTDIR|EEXIST)`),
    );
  });
});

describe("lines logged right before exit are not lost", () => {
  const logModule = join(import.meta.dir, "../../src/observe/log.ts");

  async function run(script: string): Promise<{ stderr: string; code: number }> {
    const path = join(dir, `exit-${Math.random().toString(36).slice(2)}.ts`);
    writeFileSync(path, `import { createLogger, log, setLogger } from ${JSON.stringify(logModule)};\n${script}`);
    const proc = Bun.spawn([process.execPath, path], { stdout: "ignore", stderr: "pipe" });
    // A slow reader (a busy journald, a paused terminal): the pipe fills up while the child is
    // still logging. Buffered async writes would be dropped by its process.exit(); synchronous
    // writes just wait for us. A correct logger passes however long this pause is.
    await Bun.sleep(300);
    const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
    return { stderr, code };
  }

  test("to a file", async () => {
    const file = join(dir, "exit", "f.log");
    const { code } = await run(
      `const l = createLogger({ level: "info", format: "json", file: ${JSON.stringify(file)} });\n` +
        `for (let i = 0; i < 2000; i++) l.info("line " + i, { pad: "x".repeat(200) });\nprocess.exit(7);\n`,
    );
    expect(code).toBe(7);
    const lines = readFileSync(file, "utf8").trimEnd().split("\n");
    expect(lines).toHaveLength(2000);
    expect(JSON.parse(lines[1999] as string).msg).toBe("line 1999");
  });

  test("to stderr through a pipe, via the default `log`", async () => {
    const { stderr, code } = await run(
      `for (let i = 0; i < 2000; i++) log.warn("line " + i, { pad: "x".repeat(200) });\nprocess.exit(3);\n`,
    );
    expect(code).toBe(3);
    const lines = stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(2000);
    expect(lines[1999]).toMatch(/^\S+Z WARN  line 1999 pad=x+$/);
  });
});

describe("the process-wide log", () => {
  test("log and children made before setLogger follow the new logger", () => {
    const early = log.child({ module: "proxy" });
    const { logger, lines } = capture({ level: "info" });
    const prev = setLogger(logger);
    try {
      log.info("direct");
      early.info("from child", { x: 1 });
      early.debug("filtered");
      expect(log.level).toBe("info");
      expect(early.enabled("debug")).toBe(false);
    } finally {
      setLogger(prev);
    }
    expect(lines).toEqual([
      "2026-12-02T16:01:29.123Z INFO  direct\n",
      "2026-12-02T16:01:29.123Z INFO  from child module=proxy x=1\n",
    ]);
    // Restored: the default is warn, so info is filtered out again.
    expect(log.level).toBe("warn");
  });

  test("setLogger refuses the delegating log itself", () => {
    expect(() => setLogger(log)).toThrow();
    expect(() => setLogger(log.child({ a: 1 }))).toThrow();
  });
});

describe("units: *_ms and *_bytes", () => {
  test("text shows human units under the name without the suffix; JSON keeps the numbers", () => {
    const fields = { wait_ms: 8780, vram_after_bytes: 2560 * 1024 * 1024, job: 3, note_ms: "n/a" };
    const text = capture();
    text.logger.warn("m", fields);
    expect(text.lines[0]).toBe("2026-12-02T16:01:29.123Z WARN  m wait=8.78s vram_after=2.5GiB job=3 note_ms=n/a\n");
    const json = capture({ format: "json" });
    json.logger.warn("m", fields);
    expect(JSON.parse(json.lines[0]!)).toMatchObject({ wait_ms: 8780, vram_after_bytes: 2684354560, job: 3 });
  });

  test("a suffix stays where the short name is another field's: job=1 and job_ms=75.0ms, never two job=", () => {
    const text = capture();
    text.logger.warn("image job 1 completed", { job: 1, job_ms: 75, vram: "x", vram_bytes: 1024 });
    expect(text.lines[0]).toBe("2026-12-02T16:01:29.123Z WARN  image job 1 completed job=1 job_ms=75.0ms vram=x vram_bytes=1.0KiB\n");
  });
});

describe("notice", () => {
  test("shown at the default level (warn) and above, labelled NOTE (notice in JSON), not INFO; not at error", () => {
    for (const level of ["debug", "info", "warn"] as const) {
      const { logger, lines } = capture({ level });
      logger.notice("image job 1 completed", { job: 1 });
      expect(lines).toEqual(["2026-12-02T16:01:29.123Z NOTE  image job 1 completed job=1\n"]);
    }
    const json = capture({ level: "warn", format: "json" });
    json.logger.notice("image job 1 completed");
    expect(JSON.parse(json.lines[0]!)).toMatchObject({ level: "notice", msg: "image job 1 completed" });
    const quiet = capture({ level: "error" });
    quiet.logger.notice("image job 1 completed");
    expect(quiet.lines).toEqual([]);
  });

  test("a child and the process-wide log carry it too", () => {
    const { logger, lines } = capture({ level: "warn" });
    const prev = setLogger(logger);
    try {
      log.child({ job: 2 }).notice("n");
    } finally {
      setLogger(prev);
    }
    expect(lines).toEqual(["2026-12-02T16:01:29.123Z NOTE  n job=2\n"]);
  });
});

describe("batch", () => {
  test("lines logged inside reach the destination in one write, in order", () => {
    const { logger, lines } = capture();
    logger.batch(() => {
      logger.info("a");
      logger.child({ k: 1 }).warn("b");
      logger.batch(() => logger.info("c"));
    });
    logger.info("d");
    expect(lines).toEqual([
      "2026-12-02T16:01:29.123Z INFO  a\n2026-12-02T16:01:29.123Z WARN  b k=1\n2026-12-02T16:01:29.123Z INFO  c\n",
      "2026-12-02T16:01:29.123Z INFO  d\n",
    ]);
  });
});
