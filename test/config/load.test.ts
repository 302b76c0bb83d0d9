import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, describeConfig, loadConfig, type LoadOptions } from "../../src/config/load.ts";
import { SETTINGS } from "../../src/config/settings.ts";

const LINUX = { os: "linux", arch: "x64" } as const;
const EXE = "/opt/gt/gpu-turnstile";
const BESIDE = "/opt/gt/gpu-turnstile.env";

/** A fake file system; records every path read. */
function files(map: Record<string, string>) {
  const reads: string[] = [];
  const readFile = (p: string): string | null => {
    reads.push(p);
    return map[p] ?? null;
  };
  return { readFile, reads };
}

function load(opts: Partial<LoadOptions> & { files?: Record<string, string> }) {
  const fs = files(opts.files ?? {});
  const result = loadConfig({ env: {}, execPath: EXE, platform: LINUX, readFile: fs.readFile, ...opts });
  return { ...result, reads: fs.reads };
}

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    if (e instanceof ConfigError) {
      expect(e.message).not.toContain("\n");
      expect(e.message.startsWith("config error: ")).toBe(true);
      return e;
    }
    throw e;
  }
  throw new Error("expected a ConfigError");
}

const URL_ONLY = "OLLAMA_URL=http://127.0.0.1:11435\n";

describe("lookup order", () => {
  const all = {
    "/flag.env": "OLLAMA_URL=http://flag:1\n",
    "/from-env.env": "OLLAMA_URL=http://env:1\n",
    [BESIDE]: "OLLAMA_URL=http://beside:1\n",
  };

  test("the -config flag comes first and is the only file read", () => {
    const r = load({ argvConfigPath: "/flag.env", env: { GPU_TURNSTILE_CONFIG: "/from-env.env" }, files: all });
    expect(r.config.ollamaUrl).toBe("http://flag:1");
    expect(r.source).toEqual({ via: "flag", path: "/flag.env", found: true });
    expect(r.reads).toEqual(["/flag.env"]);
  });

  test("then GPU_TURNSTILE_CONFIG", () => {
    const r = load({ env: { GPU_TURNSTILE_CONFIG: "/from-env.env" }, files: all });
    expect(r.config.ollamaUrl).toBe("http://env:1");
    expect(r.source).toEqual({ via: "env", path: "/from-env.env", found: true });
    expect(r.reads).toEqual(["/from-env.env"]);
  });

  test("then gpu-turnstile.env beside the executable", () => {
    const r = load({ files: all });
    expect(r.config.ollamaUrl).toBe("http://beside:1");
    expect(r.source).toEqual({ via: "exe-dir", path: BESIDE, found: true });
  });

  test("an empty flag or GPU_TURNSTILE_CONFIG counts as not given", () => {
    const r = load({ argvConfigPath: "", env: { GPU_TURNSTILE_CONFIG: "" }, files: all });
    expect(r.source.via).toBe("exe-dir");
  });

  test("beside a Windows executable, with Windows paths", () => {
    const exe = "C:\\Program Files\\gpu-turnstile\\gpu-turnstile.exe";
    const want = "C:\\Program Files\\gpu-turnstile\\gpu-turnstile.env";
    const r = load({ execPath: exe, platform: { os: "win32", arch: "x64" }, files: { [want]: URL_ONLY } });
    expect(r.source).toEqual({ via: "exe-dir", path: want, found: true });
    expect(r.config.updateAsset).toBe("gpu-turnstile.exe");
  });

  test("a missing file beside the executable is fine", () => {
    const r = load({ env: { COMFY_URL: "http://127.0.0.1:8189" } });
    expect(r.source).toEqual({ via: "exe-dir", path: BESIDE, found: false });
    expect(r.config.comfyUrl).toBe("http://127.0.0.1:8189");
    expect(r.warnings).toEqual([]);
  });

  test("a missing -config file is an error", () => {
    const e = configError(() => load({ argvConfigPath: "/nope.env", env: { OLLAMA_URL: "http://x:1" } }));
    expect(e.message).toBe("config error: /nope.env: config file not found (given with -config)");
  });

  test("a missing GPU_TURNSTILE_CONFIG file is an error", () => {
    const e = configError(() => load({ env: { GPU_TURNSTILE_CONFIG: "/gone.env", OLLAMA_URL: "http://x:1" } }));
    expect(e.message).toBe("config error: /gone.env: config file not found (named by GPU_TURNSTILE_CONFIG)");
  });

  test("a file that cannot be read is an error naming it", () => {
    const readFile = () => {
      throw new Error("EACCES: permission denied");
    };
    const e = configError(() => loadConfig({ env: {}, execPath: EXE, platform: LINUX, readFile }));
    expect(e.message).toBe(`config error: ${BESIDE}: cannot read config file: EACCES: permission denied`);
  });
});

describe("real files in a temp dir", () => {
  let dir = "";
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "gt-config-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("reads the file beside the executable with the default reader", () => {
    const bin = join(dir, "bin");
    mkdirSync(bin);
    writeFileSync(join(bin, "gpu-turnstile.env"), "\ufeffCFG_VER=v1.0.0\r\nOLLAMA_URL=http://127.0.0.1:11435/\r\nLOGLEVEL=info\r\n");
    const r = loadConfig({ env: {}, execPath: join(bin, "gpu-turnstile"), platform: LINUX });
    expect(r.source).toEqual({ via: "exe-dir", path: join(bin, "gpu-turnstile.env"), found: true });
    expect(r.config).toMatchObject({ cfgVer: "v1.0.0", ollamaUrl: "http://127.0.0.1:11435", logLevel: "info" });
  });

  test("no file beside the executable", () => {
    const r = loadConfig({ env: { OLLAMA_URL: "http://x:1" }, execPath: join(dir, "nothing", "gt"), platform: LINUX });
    expect(r.source.found).toBe(false);
  });

  test("a directory given as the config is a clear error", () => {
    const e = configError(() => loadConfig({ argvConfigPath: dir, env: {}, execPath: EXE, platform: LINUX }));
    expect(e.message).toStartWith(`config error: ${dir}: cannot read config file: `);
  });

  test("a missing GPU_TURNSTILE_CONFIG path on disk", () => {
    const gone = join(dir, "gone.env");
    const e = configError(() => loadConfig({ env: { GPU_TURNSTILE_CONFIG: gone }, execPath: EXE, platform: LINUX }));
    expect(e.message).toBe(`config error: ${gone}: config file not found (named by GPU_TURNSTILE_CONFIG)`);
  });
});

describe("precedence", () => {
  const file = { [BESIDE]: "OLLAMA_URL=http://file:1\nUNLOAD_TIMEOUT=90s\nJOB_TIMEOUT=20m\nWARM_MODEL=\n" };

  test("process env over file over default", () => {
    const r = load({ env: { UNLOAD_TIMEOUT: "2m" }, files: file });
    expect(r.config.unloadTimeoutMs).toBe(120_000); // env
    expect(r.config.jobTimeoutMs).toBe(1_200_000); // file
    expect(r.config.llmWaitTimeoutMs).toBe(600_000); // default
  });

  test("an empty value counts as unset, in the env and in the file", () => {
    const r = load({ env: { OLLAMA_URL: "", JOB_TIMEOUT: "" }, files: file });
    expect(r.config.ollamaUrl).toBe("http://file:1");
    expect(r.config.jobTimeoutMs).toBe(1_200_000);
    const r2 = load({ env: { OLLAMA_URL: "http://x:1" }, files: { [BESIDE]: "LISTEN_OLLAMA=\nLOG_FORMAT=''\n" } });
    expect(r2.config.listenOllama).toBe(":11434");
    expect(r2.config.logFormat).toBe("text");
  });

  test("LOGLEVEL beats its alias LOG_LEVEL in the same source, with a warning", () => {
    const r = load({ files: { [BESIDE]: `${URL_ONLY}LOG_LEVEL=debug\nLOGLEVEL=error\n` } });
    expect(r.config.logLevel).toBe("error");
    expect(r.warnings).toEqual([`${BESIDE}:2: LOG_LEVEL ignored because LOGLEVEL is set (line 3)`]);
    const r2 = load({ env: { OLLAMA_URL: "http://x:1", LOG_LEVEL: "debug", LOGLEVEL: "info" } });
    expect(r2.config.logLevel).toBe("info");
    expect(r2.warnings).toEqual(["environment: LOG_LEVEL ignored because LOGLEVEL is set"]);
  });

  test("LOG_LEVEL alone works, and the env's alias still beats the file's LOGLEVEL", () => {
    expect(load({ env: { OLLAMA_URL: "http://x:1", LOG_LEVEL: "debug" } }).config.logLevel).toBe("debug");
    const r = load({ env: { LOG_LEVEL: "info" }, files: { [BESIDE]: `${URL_ONLY}LOGLEVEL=error\n` } });
    expect(r.config.logLevel).toBe("info");
  });

  test("a key set twice in the file: the last wins, with a warning", () => {
    const r = load({ files: { [BESIDE]: `${URL_ONLY}JOB_TIMEOUT=1m\n\nJOB_TIMEOUT=2m\n` } });
    expect(r.config.jobTimeoutMs).toBe(120_000);
    expect(r.warnings).toEqual([`${BESIDE}:4: JOB_TIMEOUT is set again (first on line 2); the last one wins`]);
  });
});

describe("unknown keys", () => {
  test("in the file: a warning with file:line and the closest known key", () => {
    const r = load({
      env: { COMFY_URL: "http://127.0.0.1:8189" },
      files: { [BESIDE]: "OLAMA_URL=http://x:1\nloglevel=debug\nTOTALLY_ELSE=1\n" },
    });
    expect(r.warnings).toEqual([
      `${BESIDE}:1: unknown setting OLAMA_URL ignored (did you mean OLLAMA_URL?)`,
      `${BESIDE}:2: unknown setting loglevel ignored (did you mean LOGLEVEL?)`,
      `${BESIDE}:3: unknown setting TOTALLY_ELSE ignored`,
    ]);
    expect(r.config.ollamaUrl).toBe("");
    expect(r.config.logLevel).toBe("warn");
  });

  test("in the process env: ignored silently", () => {
    const r = load({ env: { OLLAMA_URL: "http://x:1", OLAMA_URL: "oops", PATH: "/bin", HOME: "/root" } });
    expect(r.warnings).toEqual([]);
  });
});

describe("values", () => {
  const base = { OLLAMA_URL: "http://127.0.0.1:11435" };
  const cfg = (env: Record<string, string>) => load({ env: { ...base, ...env } }).config;

  test("URLs lose trailing slashes and keep a path prefix", () => {
    expect(cfg({ OLLAMA_URL: "http://127.0.0.1:11435///" }).ollamaUrl).toBe("http://127.0.0.1:11435");
    expect(cfg({ COMFY_URL: "https://gpu.lan/comfy/" }).comfyUrl).toBe("https://gpu.lan/comfy");
    expect(cfg({ UPDATE_REPO: "https://example.org/a/b/" }).updateRepo).toBe("https://example.org/a/b");
  });

  test("enums and booleans are case-insensitive", () => {
    const c = cfg({ LLM_BUSY_MODE: "Reject", LOG_FORMAT: "JSON", LOGLEVEL: "DEBUG", AUTO_UPDATE: "No" });
    expect([c.llmBusyMode, c.logFormat, c.logLevel, c.autoUpdate]).toEqual(["reject", "json", "debug", false]);
    for (const [t, v] of [["true", true], ["1", true], ["on", true], ["YES", true], ["false", false], ["0", false], ["off", false]] as const) {
      expect(cfg({ AUTO_UPDATE: t }).autoUpdate).toBe(v);
    }
  });

  test("ints and their bounds", () => {
    expect(cfg({ BUSY_RETRY_AFTER: "Auto" }).busyRetryAfterS).toBe("auto");
    expect(cfg({}).busyRetryAfterS).toBe("auto");
    expect(cfg({ LLM_BUSY_STATUS: "429", BUSY_RETRY_AFTER: "0", RETRY_BODY_LIMIT: "0" })).toMatchObject({
      llmBusyStatus: 429,
      busyRetryAfterS: 0,
      retryBodyLimit: 0,
    });
  });

  test("0 is allowed where it means something, and only there", () => {
    expect(cfg({ HEALTH_INTERVAL: "0", SHUTDOWN_TIMEOUT: "0s" })).toMatchObject({ healthIntervalMs: 0, shutdownTimeoutMs: 0 });
    const e = configError(() => cfg({ UNLOAD_POLL_INTERVAL: "0" }));
    expect(e.message).toBe('config error: environment: UNLOAD_POLL_INTERVAL: must be greater than 0, got "0"');
  });

  test("durations longer than a JS timer can wait are refused", () => {
    expect(cfg({ UPDATE_INTERVAL: "596h" }).updateIntervalMs).toBe(596 * 3_600_000);
    const e = configError(() => cfg({ UPDATE_INTERVAL: "720h" }));
    expect(e.message).toBe(
      'config error: environment: UPDATE_INTERVAL: must be at most 596h31m23.647s (the longest timer the runtime supports), got "720h"',
    );
  });

  test("CLIENT_IDLE_TIMEOUT is refused past Bun's longest idle timer (255 s)", () => {
    expect(cfg({ CLIENT_IDLE_TIMEOUT: "4m15s" }).clientIdleTimeoutMs).toBe(255_000);
    const e = configError(() => cfg({ CLIENT_IDLE_TIMEOUT: "5m" }));
    expect(e.message).toBe('config error: environment: CLIENT_IDLE_TIMEOUT: must be at most 4m15s, got "5m"');
  });

  test("APP_VER and CFG_VER", () => {
    expect(cfg({ APP_VER: "v1.2.3", CFG_VER: "v1.0.0" })).toMatchObject({ appVer: "v1.2.3", cfgVer: "v1.0.0" });
    expect(cfg({ APP_VER: "dev" }).appVer).toBe("dev");
  });
});

describe("errors name the key, and file:line for a value from the file", () => {
  test("the example from the brief, exactly", () => {
    const text = `${URL_ONLY}\n\n# comment\n\n\nLLM_BUSY_MODE=sometimes\n`;
    const e = configError(() => load({ argvConfigPath: "/etc/gpu-turnstile.env", files: { "/etc/gpu-turnstile.env": text } }));
    expect(e.message).toBe('config error: /etc/gpu-turnstile.env:7: LLM_BUSY_MODE: expected "wait" or "reject", got "sometimes"');
  });

  const BAD: Record<string, string> = {
    duration: "soon",
    int: "many",
    enum: "sometimes",
    bool: "maybe",
    url: "ftp://example.org",
    listen: "nowhere",
    string: "x/y (only checked where a pattern exists)",
  };
  const checkable = SETTINGS.filter((d) => d.kind !== "string" || d.pattern);

  for (const def of checkable) {
    const bad = def.key === "APP_VER" ? "latest" : def.key === "CFG_VER" ? "1.2" : (BAD[def.kind] ?? "?");
    test(`${def.key}=${bad}`, () => {
      const text = `# first\n${URL_ONLY.replace("OLLAMA_URL", def.key === "OLLAMA_URL" ? "COMFY_URL" : "OLLAMA_URL")}${def.key}=${bad}\n`;
      const fromFile = configError(() => load({ files: { [BESIDE]: text } }));
      expect(fromFile.message).toStartWith(`config error: ${BESIDE}:3: ${def.key}: `);
      // A secret's value is never echoed, only its length.
      expect(fromFile.message).toEndWith(def.secret ? `, got a value of ${bad.length} characters` : `, got ${JSON.stringify(bad)}`);
      const fromEnv = configError(() => load({ env: { COMFY_URL: "http://127.0.0.1:8189", [def.key]: bad } }));
      expect(fromEnv.message).toStartWith(`config error: environment: ${def.key}: `);
    });
  }

  test("messages per kind say what was expected", () => {
    const msg = (env: Record<string, string>) => configError(() => load({ env: { OLLAMA_URL: "http://x:1", ...env } })).message;
    expect(msg({ UNLOAD_TIMEOUT: "10" })).toBe(
      'config error: environment: UNLOAD_TIMEOUT: expected a duration like 500ms, 60s or 1h30m (missing unit in duration "10" (use ns, us, ms, s, m or h)), got "10"',
    );
    expect(msg({ LLM_BUSY_STATUS: "200" })).toBe('config error: environment: LLM_BUSY_STATUS: must be between 400 and 599, got "200"');
    expect(msg({ BUSY_RETRY_AFTER: "-1" })).toBe('config error: environment: BUSY_RETRY_AFTER: expected "auto" or a whole number, got "-1"');
    expect(msg({ BUSY_RETRY_AFTER: "soon" })).toBe('config error: environment: BUSY_RETRY_AFTER: expected "auto" or a whole number, got "soon"');
    expect(msg({ BUSY_RETRY_AFTER: "90000" })).toBe('config error: environment: BUSY_RETRY_AFTER: must be between 0 and 86400, got "90000"');
    expect(msg({ LOGLEVEL: "verbose" })).toBe('config error: environment: LOGLEVEL: expected "debug", "info", "warn" or "error", got "verbose"');
    expect(msg({ LOG_LEVEL: "verbose" })).toBe('config error: environment: LOG_LEVEL: expected "debug", "info", "warn" or "error", got "verbose"');
    expect(msg({ AUTO_UPDATE: "maybe" })).toBe('config error: environment: AUTO_UPDATE: expected "true" or "false", got "maybe"');
    expect(msg({ COMFY_URL: "ftp://gpu.lan" })).toBe('config error: environment: COMFY_URL: expected an absolute http:// or https:// URL, got "ftp://gpu.lan"');
    expect(msg({ COMFY_URL: "http://x:1/?a=b" })).toBe('config error: environment: COMFY_URL: a base URL cannot have a query or fragment, got "http://x:1/?a=b"');
    expect(msg({ LISTEN_COMFY: "8188" })).toBe(
      'config error: environment: LISTEN_COMFY: expected ":port", "host:port" or "[ipv6]:port" (did you mean ":8188"?), got "8188"',
    );
    expect(msg({ APP_VER: "latest" })).toBe('config error: environment: APP_VER: expected "stable", "dev" or a version like v1.2.3, got "latest"');
  });

  test("a URL without its scheme (written like OLLAMA_HOST) gets the one to add", () => {
    const e = configError(() => load({ files: { [BESIDE]: "# upstreams\nOLLAMA_URL=127.0.0.1:11435\n" } }));
    expect(e.message).toBe(
      `config error: ${BESIDE}:2: OLLAMA_URL: expected an absolute http:// or https:// URL (did you mean "http://127.0.0.1:11435"?), got "127.0.0.1:11435"`,
    );
    const msg = (url: string) => configError(() => load({ env: { COMFY_URL: url } })).message;
    expect(msg("localhost:8188")).toContain('(did you mean "http://localhost:8188"?), got "localhost:8188"');
    expect(msg("[::1]:8188/comfy")).toContain('(did you mean "http://[::1]:8188/comfy"?)');
    for (const notJustHostPort of ["ftp://gpu.lan", "http//gpu.lan", "gpu lan", "gpu.lan:port"]) expect(msg(notJustHostPort)).not.toContain("did you mean");
  });

  test("a malformed line is a config error with file:line", () => {
    const e = configError(() => load({ files: { [BESIDE]: `${URL_ONLY}UNLOAD_TIMEOUT="90s\n` } }));
    expect(e.message).toBe(`config error: ${BESIDE}:2: UNLOAD_TIMEOUT: unterminated double quote`);
  });

  test("neither OLLAMA_URL nor COMFY_URL names both keys and where to set them", () => {
    const e = configError(() => load({ files: { [BESIDE]: "LOGLEVEL=info\n" } }));
    expect(e.message).toBe(
      `config error: neither OLLAMA_URL nor COMFY_URL is set; set at least one in ${BESIDE} or the environment, e.g. OLLAMA_URL=http://127.0.0.1:11435`,
    );
    // also when there is no file at all: it names the file it looked for
    expect(configError(() => load({})).message).toContain(`set at least one in ${BESIDE} or the environment`);
  });

  test("BACKOFF_MAX below BACKOFF_INITIAL blames the one that was set", () => {
    const e = configError(() => load({ files: { [BESIDE]: `${URL_ONLY}BACKOFF_INITIAL=5s\nBACKOFF_MAX=2s\n` } }));
    expect(e.message).toBe(`config error: ${BESIDE}:3: BACKOFF_MAX: must be at least BACKOFF_INITIAL (5s), got "2s"`);
    const e2 = configError(() => load({ env: { OLLAMA_URL: "http://x:1", BACKOFF_INITIAL: "2m" } }));
    expect(e2.message).toBe('config error: environment: BACKOFF_INITIAL: must be at most BACKOFF_MAX (1m0s), got "2m"');
  });

  test("QUOTA_GPU_SECONDS: a class not in FAIR_CLASSES, a class twice or two numbers for everyone names the key and the line", () => {
    const e = configError(() => load({ files: { [BESIDE]: `${URL_ONLY}FAIR_CLASSES=fast:3,normal:1\nQUOTA_GPU_SECONDS=600,batch:60\n` } }));
    expect(e.message).toBe(`config error: ${BESIDE}:3: QUOTA_GPU_SECONDS: "batch" is not a class of FAIR_CLASSES (fast, normal), got "600,batch:60"`);
    expect(configError(() => load({ files: { [BESIDE]: `${URL_ONLY}QUOTA_GPU_SECONDS=batch:6,batch:7\n` } })).message).toBe(`config error: ${BESIDE}:2: QUOTA_GPU_SECONDS: class batch is named twice, got "batch:6,batch:7"`);
    expect(configError(() => load({ files: { [BESIDE]: `${URL_ONLY}QUOTA_GPU_SECONDS=60, 120\n` } })).message).toContain(`${BESIDE}:2: QUOTA_GPU_SECONDS: more than one number for every client`);
    expect(configError(() => load({ files: { [BESIDE]: `${URL_ONLY}QUOTA_GPU_SECONDS=10m\n` } })).message).toContain(`${BESIDE}:2: QUOTA_GPU_SECONDS:`);
    expect(load({ files: { [BESIDE]: `${URL_ONLY}QUOTA_GPU_SECONDS=1800, batch:600\nQUOTA_GPU_WINDOW=24h\n` } }).config).toMatchObject({ quotaGpuSeconds: "1800, batch:600", quotaGpuWindowMs: 24 * 3600_000 });
  });

  test("TRUSTED_PROXIES: an IPv4 address or prefix out of range names the key and the line; good ones load", () => {
    for (const bad of ["10.0.0.300", "127.0.0.1, 192.168.1.0/33", "256.1.1.1", "::1/129"]) {
      expect(configError(() => load({ files: { [BESIDE]: `${URL_ONLY}TRUSTED_PROXIES=${bad}\n` } })).message).toContain(`${BESIDE}:2: TRUSTED_PROXIES:`);
    }
    const good = "127.0.0.1, 192.168.1.5,10.0.0.0/24, ::1, fd00::/8, 0.0.0.0/0";
    expect(load({ files: { [BESIDE]: `${URL_ONLY}TRUSTED_PROXIES=${good}\n` } }).config.trustedProxies).toBe(good);
  });

  test("an upstream URL that points at our own listener would loop forever", () => {
    const e = configError(() => load({ files: { [BESIDE]: "OLLAMA_URL=http://localhost:11434\n" } }));
    expect(e.message).toBe(
      `config error: ${BESIDE}:1: OLLAMA_URL: http://localhost:11434 is the turnstile's own listener (LISTEN_OLLAMA=:11434); run the upstream on another port and point OLLAMA_URL there`,
    );
    // a different host or port is fine; so is a listener whose consumer is disabled
    expect(load({ env: { OLLAMA_URL: "http://gpu-box:11434" } }).config.ollamaUrl).toBe("http://gpu-box:11434");
    expect(load({ env: { OLLAMA_URL: "http://127.0.0.1:8188" } }).config.ollamaUrl).toBe("http://127.0.0.1:8188");
    const both = configError(() => load({ env: { OLLAMA_URL: "http://127.0.0.1:8188", COMFY_URL: "http://127.0.0.1:8189" } }));
    expect(both.message).toContain("OLLAMA_URL: http://127.0.0.1:8188 is the turnstile's own listener (LISTEN_COMFY=:8188)");
    // The nested listener counts once it is on.
    expect(load({ env: { OLLAMA_URL: "http://127.0.0.1:11436" } }).config.ollamaUrl).toBe("http://127.0.0.1:11436");
    const nested = configError(() => load({ env: { OLLAMA_URL: "http://127.0.0.1:11436", LISTEN_OLLAMA_NESTED: "127.0.0.1:11436" } }));
    expect(nested.message).toContain("OLLAMA_URL: http://127.0.0.1:11436 is the turnstile's own listener (LISTEN_OLLAMA_NESTED=127.0.0.1:11436)");
  });

  test("every problem is kept, the message holds the first", () => {
    const e = configError(() => load({ env: { JOB_TIMEOUT: "x", LOG_FORMAT: "xml", OLLAMA_URL: "http://x:1" } }));
    expect(e.problems).toEqual([
      'environment: JOB_TIMEOUT: expected a duration like 500ms, 60s or 1h30m (invalid duration "x"), got "x"',
      'environment: LOG_FORMAT: expected "text" or "json", got "xml"',
    ]);
    expect(e.message).toBe(`config error: ${e.problems[0]}`);
  });
});

describe("describeConfig", () => {
  test("one KEY=value line per setting, durations Go-style, credentials masked", () => {
    const { config } = load({
      env: { OLLAMA_URL: "http://user:secret@127.0.0.1:11435/", UNLOAD_TIMEOUT: "90s", LOG_LEVEL: "info" },
      files: { [BESIDE]: "CFG_VER=v1.2.3\nHEALTH_INTERVAL=1h30m\n" },
    });
    expect(describeConfig(config)).toEqual([
      "LISTEN_OLLAMA=:11434",
      "LISTEN_COMFY=:8188",
      "LISTEN_OLLAMA_NESTED=",
      "ALLOWED_HOSTS=",
      "OLLAMA_URL=http://***@127.0.0.1:11435",
      "COMFY_URL=",
      "LLM_KIND=ollama",
      "LMSTUDIO_TOKEN=",
      "IMAGE_KIND=comfyui",
      "SWARMUI_SESSION=",
      "SWARMUI_TOKEN=",
      "UNLOAD_TIMEOUT=1m30s",
      "JOB_TIMEOUT=15m0s",
      "IMAGE_SESSION_MAX=5m0s",
      "FAIR_TURNS=true",
      "FAIR_CLASSES=interactive:4,normal:2,batch:1",
      "FAIR_CHATS_FIRST=batch",
      "QUOTA_IMAGE_JOBS=0",
      "QUOTA_LLM_REQUESTS=0",
      "QUOTA_GPU_SECONDS=0",
      "QUOTA_GPU_WINDOW=1h0m0s",
      "CLIENTS_FILE=",
      "LLM_WAIT_TIMEOUT=10m0s",
      "LLM_DRAIN_TIMEOUT=5m0s",
      "LLM_IDLE_TIMEOUT=5m0s",
      "CLIENT_IDLE_TIMEOUT=1m0s",
      "LLM_BUSY_MODE=wait",
      "LLM_BUSY_STATUS=503",
      "BUSY_RETRY_AFTER=auto",
      "WARM_MODEL=",
      "COEXIST=false",
      "COEXIST_MODELS=",
      "COEXIST_MARGIN=1GiB",
      "COEXIST_POLL_INTERVAL=250ms",
      "LOGLEVEL=info",
      "LOG_FORMAT=text",
      "LOG_FILE=",
      "UNLOAD_POLL_INTERVAL=500ms",
      "HISTORY_POLL_INTERVAL=1s",
      "FREE_POLL_INTERVAL=250ms",
      "PROBE_TIMEOUT=5s",
      "HEALTH_INTERVAL=1h30m0s",
      "FREE_TIMEOUT=30s",
      "WARM_TIMEOUT=2m0s",
      "SHUTDOWN_TIMEOUT=10s",
      "BACKOFF_INITIAL=1s",
      "BACKOFF_MAX=1m0s",
      "UPSTREAM_RETRY_TIMEOUT=2m0s",
      "PROMPT_CAPTURE_LIMIT=65536",
      "RETRY_BODY_LIMIT=262144",
      "LEASE_MAX_TTL=12h0m0s",
      "STATE_DIR=",
      "ADMIN_TOKEN=",
      "TRUSTED_PROXIES=",
      "CARD_NAME=",
      "AGENT_LISTEN=",
      "AUTO_UPDATE=true",
      "UPDATE_INTERVAL=6h0m0s",
      "UPDATE_REPO=https://git.rambossek.at/PUBLIC/gpu-turnstile",
      "UPDATE_ASSET=gpu-turnstile-linux-x64",
      "APP_VER=stable",
      "CFG_VER=v1.2.3",
    ]);
  });

  test("credentials are masked however they are spelled, a user name alone (a token) included", () => {
    const { config } = load({ env: { OLLAMA_URL: "https://me:p%40ss:w0rd@gpu.lan:8443/ollama", COMFY_URL: "http://gpu.lan:8189" } });
    const lines = describeConfig(config);
    expect(lines).toContain("OLLAMA_URL=https://***@gpu.lan:8443/ollama");
    const token = load({ env: { OLLAMA_URL: "http://t0ken@gpu.lan:11435" } });
    expect(describeConfig(token.config)).toContain("OLLAMA_URL=http://***@gpu.lan:11435");
    expect(lines).toContain("COMFY_URL=http://gpu.lan:8189");
    expect(lines.join("\n")).not.toContain("w0rd");
  });

  test("ADMIN_TOKEN is shown as *** when set, and never in full", () => {
    const token = "t0ken-that-must-not-leak-42";
    const { config } = load({ env: { OLLAMA_URL: "http://127.0.0.1:11435", ADMIN_TOKEN: token } });
    expect(config.adminToken).toBe(token);
    const lines = describeConfig(config);
    expect(lines).toContain("ADMIN_TOKEN=***");
    expect(lines.join("\n")).not.toContain(token);
  });

  test("a config error quoting a URL masks its credentials", () => {
    let err: unknown;
    try {
      load({ env: { OLLAMA_URL: "http://admin:S3cretPW@127.0.0.1:11434" } });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const all = [(err as ConfigError).message, ...(err as ConfigError).problems].join("\n");
    expect(all).toContain("http://***@127.0.0.1:11434");
    expect(all).not.toContain("S3cretPW");
  });

  test("a config error also names the misspelled key that caused it, with its line", () => {
    const err = configError(() => load({ files: { [BESIDE]: "# mine\nOLAMA_URL=http://127.0.0.1:11435\n" } }));
    expect(err.problems).toContain(`${BESIDE}:2: unknown setting OLAMA_URL ignored (did you mean OLLAMA_URL?)`);
    // The hint comes before the fatal error it explains.
    expect(err.message).toBe(`config error: ${BESIDE}:2: unknown setting OLAMA_URL ignored (did you mean OLLAMA_URL?)`);
    expect(err.problems[1]).toContain("OLLAMA_URL");
  });

  test("a URL written without its scheme or with a space in the password is masked in the error too", () => {
    for (const url of ["admin:S3cretPW@127.0.0.1:11434", "http://admin:S3cret PW@127.0.0.1:99999"]) {
      const err = configError(() => load({ env: { OLLAMA_URL: url } }));
      expect([err.message, ...err.problems].join("\n")).not.toContain("S3cret");
    }
  });

  test("its lines load back to the same config", () => {
    const { config } = load({ env: { COMFY_URL: "http://127.0.0.1:8189", JOB_TIMEOUT: "1h2m3.5s", LLM_BUSY_MODE: "reject" } });
    const again = load({ files: { [BESIDE]: `${describeConfig(config).join("\n")}\n` } });
    expect(again.config).toEqual(config);
    expect(again.warnings).toEqual([]);
  });
});

describe("ALLOWED_HOSTS", () => {
  test.each(["gpu.lan", "gpu.lan, *.home.arpa", "*", "GPU.lan,10.0.0.7,[fd00::7],fd00::8", "my_host"])("accepts %s", (v) => {
    expect(load({ env: { ALLOWED_HOSTS: v, OLLAMA_URL: "http://127.0.0.1:11435" } }).config.allowedHosts).toBe(v);
  });

  test.each(["gpu.lan:11434", "http://gpu.lan", "*gpu.lan", "gpu.lan,,x", "a b", "*.", "gpu.lan/"])("refuses %s, naming the key", (v) => {
    const e = configError(() => load({ env: { ALLOWED_HOSTS: v, OLLAMA_URL: "http://127.0.0.1:11435" } }));
    expect(e.message).toContain("ALLOWED_HOSTS: expected comma-separated host names");
  });
});
