/**
 * build.ts end to end on a tiny stand-in entry (fast; the real entry is built by rootfs.test.ts):
 * the version stamp, the printed size and SHA-256, and that the compiled binary ignores a stray
 * .env and bunfig.toml in its working directory.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { gitVersion, versionFromDescribe, windowsVersion } from "../../build.ts";

const root = path.resolve(import.meta.dir, "../..");
let dir: string;
let built: ReturnType<typeof spawnSync>;
let binary: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-build-"));
  const entry = path.join(dir, "standin.ts");
  fs.writeFileSync(
    entry,
    `import { VERSION } from ${JSON.stringify(path.join(root, "src/version.ts"))};
if (process.argv.includes("--version")) { console.log(VERSION); process.exit(0); }
console.log(JSON.stringify({ FOO: process.env.FOO ?? null }));
`,
  );
  built = spawnSync(process.execPath, ["build.ts", "--target", "linux-x64", "--entry", entry, "--outdir", path.join(dir, "dist")], {
    cwd: root,
    env: { ...process.env, GPU_TURNSTILE_VERSION: "v9.8.7" },
    encoding: "utf8",
  });
  binary = path.join(dir, "dist", "gpu-turnstile-linux-x64");
}, 60_000);
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe("bun build.ts --target linux-x64", () => {
  test("builds one executable under its stable name, and nothing beside it", () => {
    expect(built.stderr).toBe("");
    expect(built.status).toBe(0);
    expect(fs.readdirSync(path.join(dir, "dist"))).toEqual(["gpu-turnstile-linux-x64"]);
    expect(fs.statSync(binary).mode & 0o111).not.toBe(0);
  });

  test("prints the artifact's size and SHA-256", () => {
    const bytes = fs.readFileSync(binary);
    const sha = createHash("sha256").update(bytes).digest("hex");
    const mib = (bytes.byteLength / 1048576).toFixed(1);
    expect(String(built.stdout)).toMatch(new RegExp(`gpu-turnstile-linux-x64\\s+${mib.replace(".", "\\.")} MiB\\s+sha256 ${sha}`));
  });

  test("stamps the version with --define", () => {
    const r = spawnSync(binary, ["--version"], { encoding: "utf8" });
    expect(r.stdout.trim()).toBe("v9.8.7");
  });

  test("a stray .env and bunfig.toml in the working directory are not read", () => {
    const cwd = path.join(dir, "cwd");
    fs.mkdirSync(cwd);
    fs.writeFileSync(path.join(cwd, ".env"), "FOO=leaked-from-dotenv\n");
    fs.writeFileSync(path.join(cwd, "preload.ts"), 'console.log("PRELOADED");\n');
    fs.writeFileSync(path.join(cwd, "bunfig.toml"), 'preload = ["./preload.ts"]\n');
    const env = { ...process.env };
    delete env.FOO;
    const r = spawnSync(binary, [], { cwd, env, encoding: "utf8" });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('{"FOO":null}\n');
  });

  test("an unknown target is refused", () => {
    const r = spawnSync(process.execPath, ["build.ts", "--target", "darwin-x64"], { cwd: root, encoding: "utf8" });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/unknown --target darwin-x64/);
  });
});

describe("version stamp", () => {
  test("git describe output → version", () => {
    expect(versionFromDescribe("v1.2.3\n")).toBe("v1.2.3");
    expect(versionFromDescribe("v1.2.3-4-gabc1234-dirty")).toBe("v1.2.3-4-gabc1234-dirty");
    expect(versionFromDescribe("abc1234")).toBe("v0.0.0-dev+abc1234");
    expect(versionFromDescribe("abc1234-dirty")).toBe("v0.0.0-dev+abc1234-dirty");
    expect(versionFromDescribe(null)).toBe("v0.0.0-dev+unknown");
  });

  test("this checkout stamps something version-shaped", () => {
    expect(gitVersion()).toMatch(/^v\d+\.\d+\.\d+/);
  });

  test("Windows numeric version", () => {
    expect(windowsVersion("v1.2.3")).toBe("1.2.3.0");
    expect(windowsVersion("v0.0.0-dev+abc")).toBe("0.0.0.0");
  });
});
