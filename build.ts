/**
 * Compile gpu-turnstile into standalone executables:
 *
 *   bun build.ts                         all targets into dist/
 *   bun build.ts --target linux-x64      one target (repeatable)
 *   bun build.ts --sign                  also write <asset>.sig and <asset>.sha256 (RELEASE_SIGNING_KEY),
 *                                        signed for the stamped version as the release tag
 *   bun build.ts --entry x.ts --outdir d (tests)
 *
 * The version comes from `git describe --tags --always --dirty` (a tree without tags stamps
 * `v0.0.0-dev+<sha>`); GPU_TURNSTILE_VERSION overrides it where there is no .git (Docker).
 * Compiled binaries would read a stray .env / bunfig.toml from their working directory; that
 * autoloading is switched off.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { parseArgs } from "node:util";

export const TARGETS = {
  "linux-x64": { bun: "bun-linux-x64", file: "gpu-turnstile-linux-x64" },
  "linux-arm64": { bun: "bun-linux-arm64", file: "gpu-turnstile-linux-arm64" },
  "windows-x64": { bun: "bun-windows-x64", file: "gpu-turnstile.exe" },
} as const;
export type Target = keyof typeof TARGETS;

const ROOT = import.meta.dir;

/** `git describe` output → the version stamp. No tag reachable: only a sha comes back. */
export function versionFromDescribe(describe: string | null): string {
  const d = describe?.trim() ?? "";
  if (/^v\d+\.\d+\.\d+/.test(d)) return d;
  if (/^[0-9a-f]{4,40}(-dirty)?$/.test(d)) return `v0.0.0-dev+${d}`;
  return "v0.0.0-dev+unknown";
}

export function gitVersion(cwd = ROOT): string {
  const r = spawnSync("git", ["describe", "--tags", "--always", "--dirty", "--match", "v[0-9]*"], { cwd, encoding: "utf8" });
  return versionFromDescribe(r.status === 0 ? r.stdout : null);
}

/** X.Y.Z.0 for Windows' numeric version fields; dev builds are 0.0.0.0. */
export function windowsVersion(version: string): string {
  const m = /^v(\d+)\.(\d+)\.(\d+)$/.exec(version);
  return m ? `${m[1]}.${m[2]}.${m[3]}.0` : "0.0.0.0";
}

export interface Artifact {
  target: Target;
  path: string;
  bytes: number;
  sha256: string;
}

export interface BuildOptions {
  targets: Target[];
  entry: string;
  outdir: string;
  version: string;
}

export async function build(o: BuildOptions): Promise<Artifact[]> {
  fs.mkdirSync(o.outdir, { recursive: true });
  const artifacts: Artifact[] = [];
  for (const target of o.targets) {
    const { bun, file } = TARGETS[target];
    const outfile = path.join(o.outdir, file);
    const result = await Bun.build({
      entrypoints: [o.entry],
      throw: false,
      format: "esm",
      // Without splitting, every module a dynamic import() can reach (the demo and its simulators,
      // the service integration, the updater) is loaded at start even when never imported: ~5 ms
      // of the compiled start-up (docs/BENCHMARKS.md). Split, they stay in the executable and load
      // on first import.
      splitting: true,
      minify: true,
      bytecode: true,
      sourcemap: "linked",
      define: { __GPU_TURNSTILE_VERSION__: JSON.stringify(o.version) },
      compile: {
        target: bun,
        outfile,
        autoloadDotenv: false,
        autoloadBunfig: false,
        // Bun writes these resources only when it runs on Windows; cross-builds keep Bun's own
        // (see docs/RELEASING.md for why they are not patched afterwards).
        windows:
          process.platform === "win32"
            ? {
                title: "gpu-turnstile",
                publisher: "gpu-turnstile",
                version: windowsVersion(o.version),
                description: "GPU arbitration proxy for Ollama and ComfyUI",
                copyright: "",
              }
            : undefined,
      },
    });
    if (!result.success) {
      throw new AggregateError(result.logs, `build for ${target} failed:\n${result.logs.map(String).join("\n")}`);
    }
    // The source map is embedded in the executable (stack traces name the .ts files); the copy
    // on disk would only be mistaken for a release asset.
    for (const out of result.outputs) if (out.kind === "sourcemap") fs.rmSync(out.path, { force: true });
    const bytes = fs.readFileSync(outfile);
    artifacts.push({ target, path: outfile, bytes: bytes.byteLength, sha256: createHash("sha256").update(bytes).digest("hex") });
  }
  return artifacts;
}

function isTarget(t: string): t is Target {
  return Object.hasOwn(TARGETS, t);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      target: { type: "string", multiple: true },
      entry: { type: "string", default: "src/main.ts" },
      outdir: { type: "string", default: "dist" },
      sign: { type: "boolean", default: false },
    },
    strict: true,
  });
  const targets = values.target ?? (Object.keys(TARGETS) as Target[]);
  const bad = targets.filter((t) => !isTarget(t));
  if (bad.length) throw new Error(`unknown --target ${bad.join(", ")} (known: ${Object.keys(TARGETS).join(", ")})`);
  const version = process.env.GPU_TURNSTILE_VERSION?.trim() || gitVersion();
  const entry = path.resolve(ROOT, values.entry);
  const outdir = path.resolve(ROOT, values.outdir);
  console.log(`gpu-turnstile ${version}  (${path.relative(ROOT, entry)})`);
  const artifacts = await build({ targets: targets.filter(isTarget), entry, outdir, version });
  for (const a of artifacts) {
    console.log(`${path.relative(ROOT, a.path).padEnd(32)} ${(a.bytes / 1048576).toFixed(1).padStart(6)} MiB  sha256 ${a.sha256}`);
  }
  if (values.sign) {
    const { signAssets } = await import("./scripts/sign.ts");
    const { PUBLIC_KEY_BASE64 } = await import("./src/update/pubkey.ts");
    const pem = process.env.RELEASE_SIGNING_KEY ?? "";
    if (pem.trim() === "") throw new Error("--sign needs the PEM key in RELEASE_SIGNING_KEY");
    const assets = artifacts.map((a) => a.path);
    for (const s of signAssets({ assets, tag: version, pem, expectPublicKey: PUBLIC_KEY_BASE64 })) {
      console.log(`signed ${path.relative(ROOT, s.sig)}, ${path.relative(ROOT, s.sha256File)}`);
    }
  }
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    console.error(`build: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}
