/** The GPU lease kept on disk across a restart (status/lease-file.ts). */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { closeSync, ftruncateSync, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LEASE_FILE_MAX_BYTES, LeaseFile, leaseFileName, parseLeaseFile } from "../../src/status/lease-file.ts";
import type { StoredLease } from "../../src/status/steer.ts";

const LEASE: StoredLease = { id: "L1", holder: "train.py", by: "127.0.0.1", since: 1000, expires_at: 2000, ttl_ms: 1000 };
const GUARDED = { ollamaUrl: "http://user:secret@127.0.0.1:11435/", comfyUrl: "http://127.0.0.1:8189" };

let dir: string;
let warnings: string[];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "lease-file-"));
  warnings = [];
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const file = (d = join(dir, "state")) => new LeaseFile(d, GUARDED, { warn: (m, f) => warnings.push(`${m} ${JSON.stringify(f)}`) });

test("keyed by the upstreams guarded: the same card under another spelling shares it, another card does not", () => {
  const name = leaseFileName(GUARDED);
  expect(name).toMatch(/^lease-[0-9a-f]{16}\.json$/);
  expect(leaseFileName({ ollamaUrl: "http://127.0.0.1:11435", comfyUrl: "http://127.0.0.1:8189/" })).toBe(name);
  expect(leaseFileName({ ollamaUrl: "http://127.0.0.1:11436", comfyUrl: "http://127.0.0.1:8189" })).not.toBe(name);
  expect(leaseFileName({ ollamaUrl: "", comfyUrl: "http://127.0.0.1:8189" })).not.toBe(name);
});

test("keyed as the card claim spells an upstream: credentials, a default port written out, a query and a trailing slash change nothing", () => {
  const name = leaseFileName({ ollamaUrl: "http://gpu-box:11434", comfyUrl: "https://comfy.example/ui" });
  expect(leaseFileName({ ollamaUrl: "http://admin:pw@GPU-Box:11434/", comfyUrl: "https://comfy.example:443/ui/?x=1" })).toBe(name);
});

test("kept and read back; the folder is created, the file is 0600 and holds no credential", () => {
  const f = file();
  expect(f.load()).toBeNull();
  f.save(LEASE);
  expect(f.load()).toEqual(LEASE);
  expect(statSync(f.path).mode & 0o777).toBe(0o600);
  const text = readFileSync(f.path, "utf8");
  expect(text).not.toContain("secret");
  expect(text).toContain("127.0.0.1:8189");
  // Replaced whole: no temporary file stays behind.
  f.save({ ...LEASE, expires_at: 3000 });
  expect(readdirSync(join(dir, "state"))).toEqual([f.path.slice(f.path.lastIndexOf("/") + 1)]);
  expect(f.load()?.expires_at).toBe(3000);
  expect(warnings).toEqual([]);
});

test("a lease that ended removes the file; removing none is no problem", () => {
  const f = file();
  f.save(LEASE);
  f.save(null);
  expect(f.load()).toBeNull();
  f.save(null);
  expect(warnings).toEqual([]);
});

test("a damaged file is said and ignored; a folder that cannot be written is said, the lease goes on", () => {
  const f = file(dir);
  writeFileSync(f.path, "{ half a lease");
  expect(f.load()).toBeNull();
  expect(warnings[0]).toContain("damaged");
  const blocked = join(dir, "not-a-dir");
  writeFileSync(blocked, "");
  file(blocked).save(LEASE);
  expect(warnings[1]).toContain("will not survive a restart");
});

test("parseLeaseFile refuses what is not a lease", () => {
  expect(parseLeaseFile('{"lease":null}')).toBeNull();
  expect(() => parseLeaseFile("{}")).toThrow();
  expect(() => parseLeaseFile('{"lease":{"id":"x"}}')).toThrow();
  expect(() => parseLeaseFile('{"lease":{"id":"x","holder":"h","by":"b","since":1,"expires_at":-1,"ttl_ms":1}}')).toThrow();
});

test("a link planted at the temporary file's name (a STATE_DIR others may write) is not followed: its target is neither written nor chmod'ed", () => {
  const f = file(dir);
  const victim = join(mkdtempSync(join(tmpdir(), "lease-victim-")), "victim");
  writeFileSync(victim, "precious\n", { mode: 0o644 });
  symlinkSync(victim, `${f.path}.${process.pid}.tmp`);
  f.save(LEASE);
  expect(readFileSync(victim, "utf8")).toBe("precious\n");
  expect(statSync(victim).mode & 0o777).toBe(0o644);
  expect(f.load()).toEqual(LEASE);
  expect(lstatSync(f.path).isSymbolicLink()).toBe(false);
  rmSync(join(victim, ".."), { recursive: true, force: true });
});

test("a link at the lease file's name is not read: a lease planted elsewhere, or any file the turnstile may read, is not taken", () => {
  const f = file(dir);
  const elsewhere = join(mkdtempSync(join(tmpdir(), "lease-planted-")), "lease.json");
  writeFileSync(elsewhere, JSON.stringify({ lease: LEASE }));
  symlinkSync(elsewhere, f.path);
  expect(f.load()).toBeNull();
  expect(warnings.join("\n")).toContain("not a plain file");
  rmSync(join(elsewhere, ".."), { recursive: true, force: true });
});

test("a 300 MiB lease file is not read whole at start: said, naming the file and the bound, and kept as no lease", () => {
  const f = file();
  mkdirSync(join(dir, "state"), { recursive: true });
  const fd = openSync(f.path, "w", 0o600);
  ftruncateSync(fd, 300 << 20);
  closeSync(fd);
  expect(f.load()).toBeNull();
  expect(warnings).toEqual([
    `could not read the kept GPU lease ${JSON.stringify({ file: f.path, reason: `${f.path} is larger than ${LEASE_FILE_MAX_BYTES >> 10} KiB, the most gpu-turnstile reads of such a file` })}`,
  ]);
});
