import { describe, expect, test } from "bun:test";
import { isCompiled, selfCommand, userArgs } from "../../src/runtime/compiled.ts";
import { FETCH_LIMIT, FETCH_LIMIT_VAR, decideReexec } from "../../src/runtime/fetch-limit.ts";

/** An https upstream is proxied through fetch, so these starts need the limit lifted. */
const TLS = ["https://gpu.lan:11434", ""];

describe("decideReexec", () => {
  test.each(["linux", "win32", "darwin"])("an interactive start on %s re-runs itself with the limit lifted", (platform) => {
    expect(decideReexec({ PATH: "/usr/bin" }, platform, [], TLS)).toEqual({ reexec: true });
  });

  test("the variable already set (the re-run child, the container) does not re-run again", () => {
    expect(decideReexec({ [FETCH_LIMIT_VAR]: FETCH_LIMIT }, "linux", [], TLS)).toEqual({ reexec: false, why: "already set" });
    expect(decideReexec({ [FETCH_LIMIT_VAR]: "1000" }, "win32", [], TLS).reexec).toBe(false);
  });

  test("an empty variable counts as unset", () => {
    expect(decideReexec({ [FETCH_LIMIT_VAR]: "" }, "linux", [], TLS)).toEqual({ reexec: true });
  });

  test("under systemd the process stays the main PID so sd_notify is accepted", () => {
    expect(decideReexec({ NOTIFY_SOCKET: "/run/systemd/notify" }, "linux", [], TLS).reexec).toBe(false);
  });

  test("as a Windows service the process stays the one the SCM started", () => {
    expect(decideReexec({}, "win32", ["--windows-service"], TLS).reexec).toBe(false);
    expect(decideReexec({}, "win32", ["--config", "x.env"], TLS).reexec).toBe(true);
  });

  test("with only http upstreams (or disabled ones) nothing goes through fetch: no re-run", () => {
    expect(decideReexec({}, "linux", [], ["http://127.0.0.1:11434", "http://10.0.0.2:8188"]).reexec).toBe(false);
    expect(decideReexec({}, "win32", [], ["http://127.0.0.1:11434", ""]).reexec).toBe(false);
    expect(decideReexec({}, "linux", [], ["http://127.0.0.1:11434", "HTTPS://comfy.lan"]).reexec).toBe(true);
  });

  test("an unknown platform is left alone", () => {
    expect(decideReexec({}, "freebsd", [], TLS)).toEqual({ reexec: false, why: "unknown platform" });
  });

  test("the lifted limit is Bun's ceiling", () => {
    expect(FETCH_LIMIT_VAR).toBe("BUN_CONFIG_MAX_HTTP_REQUESTS");
    expect(FETCH_LIMIT).toBe("65535");
  });
});

describe("isCompiled", () => {
  test.each([
    ["/$bunfs/root/gpu-turnstile", true],
    ["B:\\~BUN\\root\\gpu-turnstile.exe", true],
    ["B:/~BUN/root/gpu-turnstile.exe", true],
    ["/work/main/src/main.ts", false],
    ["C:\\Users\\me\\gpu-turnstile\\src\\main.ts", false],
    ["/home/me/$bunfs/main.ts", false],
    ["", false],
  ] as const)("%s → %p", (argv1, want) => {
    expect(isCompiled(argv1)).toBe(want);
  });

  test("no script at all is not compiled", () => {
    expect(isCompiled(undefined)).toBe(false);
  });

  test("this test run is from source", () => {
    expect(isCompiled()).toBe(false);
  });
});

describe("selfCommand and userArgs", () => {
  test("a compiled binary re-runs the executable alone", () => {
    expect(selfCommand(["/opt/gt/gpu-turnstile", "/$bunfs/root/gpu-turnstile", "--config", "x"], "/opt/gt/gpu-turnstile")).toEqual([
      "/opt/gt/gpu-turnstile",
    ]);
    expect(selfCommand(["C:\\gt\\gpu-turnstile.exe", "B:\\~BUN\\root\\gpu-turnstile.exe"], "C:\\gt\\gpu-turnstile.exe")).toEqual([
      "C:\\gt\\gpu-turnstile.exe",
    ]);
  });

  test("from source it re-runs the runtime with the script", () => {
    expect(selfCommand(["/usr/bin/bun", "/work/main/src/main.ts", "-config", "x"], "/usr/bin/bun")).toEqual([
      "/usr/bin/bun",
      "/work/main/src/main.ts",
    ]);
  });

  test("user arguments are everything after the runtime and the script", () => {
    expect(userArgs(["bun", "main.ts", "--install-service", "-config", "x"])).toEqual(["--install-service", "-config", "x"]);
    expect(userArgs(["bun", "main.ts"])).toEqual([]);
  });
});
