/** The updater's pure rules: what APP_VER asks for, which URLs may be fetched, what a .sha256 says. */
import { describe, expect, test } from "bun:test";
import { channelFor, decide } from "../../src/update/decide.ts";
import type { Decision } from "../../src/update/decide.ts";
import { parseRepoUrl, releaseApiUrl } from "../../src/update/gitea.ts";
import { isLoopbackHost, urlRefusal } from "../../src/update/url-policy.ts";
import { decodePublicKey, parseSha256File } from "../../src/update/verify.ts";
import { isDevVersion } from "../../src/version.ts";
import { PUBLIC_KEY_BASE64 } from "../../src/update/pubkey.ts";
import { releaseStatement, statementRefusal } from "../../src/update/statement.ts";

const rel = (tag: string, extra: Partial<{ prerelease: boolean; draft: boolean }> = {}) => ({ tag, prerelease: false, draft: false, ...extra });

describe("decide", () => {
  const cases: [appVer: string, current: string, tag: string, action: Decision["action"], reason: RegExp][] = [
    ["stable", "v1.2.0", "v1.3.0", "stage", /v1\.3\.0 is newer than v1\.2\.0/],
    ["stable", "v1.9.0", "v1.10.0", "stage", /newer/], // numeric, not lexicographic
    ["stable", "v1.2.0", "v1.2.0", "skip", /up to date/],
    ["stable", "v1.2.0", "v1.1.0", "skip", /newer than the latest release v1\.1\.0/],
    ["stable", "v0.0.0-dev+abc", "v1.0.0", "stage", /dev build/],
    ["stable", "v1.2.0-3-gabc", "v1.2.0", "stage", /dev build/],
    ["stable", "v1.2.0", "v2.0.0-rc1", "refuse", /not vX\.Y\.Z/],
    ["stable", "v1.2.0", "latest", "refuse", /not vX\.Y\.Z/],
    ["v1.0.0", "v1.2.0", "v1.0.0", "stage", /downgrade/],
    ["v1.4.0", "v1.2.0", "v1.4.0", "stage", /APP_VER pins v1\.4\.0/],
    ["v1.0.0", "v0.0.0-dev+abc", "v1.0.0", "stage", /pins/],
    ["v1.2.0", "v1.2.0", "v1.2.0", "skip", /pinned/],
    ["v1.2.0", "v1.0.0", "v1.3.0", "refuse", /asked for release v1\.2\.0, the server answered v1\.3\.0/],
    ["dev", "v1.0.0", "v2.0.0", "skip", /APP_VER=dev/],
  ];
  test.each(cases)("APP_VER=%s running %s, release %s → %s", (appVer, current, tag, action, reason) => {
    const d = decide(channelFor(appVer), current, rel(tag));
    expect(d.action).toBe(action);
    expect(d.reason).toMatch(reason);
  });

  test("stable ignores pre-releases and refuses drafts; a pin takes a pre-release it names", () => {
    expect(decide(channelFor("stable"), "v1.0.0", rel("v2.0.0", { prerelease: true })).action).toBe("skip");
    expect(decide(channelFor("stable"), "v1.0.0", rel("v2.0.0", { draft: true })).action).toBe("refuse");
    expect(decide(channelFor("v2.0.0"), "v1.0.0", rel("v2.0.0", { prerelease: true })).action).toBe("stage");
  });

  test("channels", () => {
    expect(channelFor("dev")).toEqual({ kind: "off", reason: "APP_VER=dev: updates are off" });
    expect(channelFor("stable")).toEqual({ kind: "latest" });
    expect(channelFor("v3.2.1")).toEqual({ kind: "pin", tag: "v3.2.1" });
    expect(channelFor("latest").kind).toBe("off");
  });
});

test("isDevVersion: only an exact non-zero vX.Y.Z is a release", () => {
  for (const v of ["dev", "v0.0.0", "v0.0.0-dev+abc1234", "v1.2.3-4-gabc1234", "v1.2.3-dirty", "1.2.3"]) expect(isDevVersion(v)).toBe(true);
  for (const v of ["v0.0.1", "v1.2.3", "v10.0.0"]) expect(isDevVersion(v)).toBe(false);
});

describe("URL policy", () => {
  const host = "git.example.org";
  test("https on the update host only", () => {
    expect(urlRefusal(new URL("https://git.example.org/a"), host)).toBeNull();
    expect(urlRefusal(new URL("https://git.example.org:443/a"), host)).toBeNull();
    expect(urlRefusal(new URL("http://git.example.org/a"), host)).toMatch(/only https is allowed/);
    expect(urlRefusal(new URL("https://objects.example.net/a"), host)).toMatch(/not the update host git\.example\.org/);
    expect(urlRefusal(new URL("https://git.example.org:8443/a"), host)).toMatch(/not the update host/);
    expect(urlRefusal(new URL("https://u:p@git.example.org/a"), host)).toMatch(/credentials/);
    expect(urlRefusal(new URL("ftp://git.example.org/a"), host)).toMatch(/only https/);
  });
  test("plain http for loopback alone", () => {
    expect(urlRefusal(new URL("http://127.0.0.1:3000/a"), "127.0.0.1:3000")).toBeNull();
    expect(urlRefusal(new URL("http://[::1]:3000/a"), "[::1]:3000")).toBeNull();
    expect(urlRefusal(new URL("http://localhost:3000/a"), "localhost:3000")).toBeNull();
    expect(urlRefusal(new URL("http://10.0.0.1:3000/a"), "10.0.0.1:3000")).toMatch(/only https/);
    expect(isLoopbackHost("127.8.9.10")).toBe(true);
    expect(isLoopbackHost("127.0.0.1.nip.io")).toBe(false);
  });
});

describe("UPDATE_REPO", () => {
  test("host/owner/repo, with a subpath, a trailing slash or .git", () => {
    const r = parseRepoUrl("https://git.rambossek.at/PUBLIC/gpu-turnstile");
    expect(r).toEqual({ base: "https://git.rambossek.at", host: "git.rambossek.at", owner: "PUBLIC", repo: "gpu-turnstile" });
    expect(releaseApiUrl(r, { kind: "latest" })).toBe("https://git.rambossek.at/api/v1/repos/PUBLIC/gpu-turnstile/releases/latest");
    expect(releaseApiUrl(r, { kind: "tag", tag: "v1.2.3" })).toBe("https://git.rambossek.at/api/v1/repos/PUBLIC/gpu-turnstile/releases/tags/v1.2.3");
    expect(parseRepoUrl("https://h:8443/gitea/o/r.git/")).toEqual({ base: "https://h:8443/gitea", host: "h:8443", owner: "o", repo: "r" });
  });
  test("anything else is refused with the value", () => {
    expect(() => parseRepoUrl("https://h/only-owner")).toThrow(/must look like https:\/\/host\/owner\/repo/);
    expect(() => parseRepoUrl("not a url")).toThrow(/not a URL/);
  });
});

describe(".sha256 files", () => {
  const hex = "a".repeat(64);
  test("sha256sum formats", () => {
    expect(parseSha256File(`${hex}  gpu-turnstile.exe\n`, "gpu-turnstile.exe")).toEqual({ hex });
    expect(parseSha256File(`${hex} *gpu-turnstile.exe\r\n`, "gpu-turnstile.exe")).toEqual({ hex });
    expect(parseSha256File(`${hex.toUpperCase()}\n`, "gpu-turnstile.exe")).toEqual({ hex });
  });
  test("another file's digest or garbage is refused", () => {
    expect(parseSha256File(`${hex}  other.exe\n`, "gpu-turnstile.exe")).toEqual({ refusal: 'gpu-turnstile.exe.sha256 is for "other.exe", not gpu-turnstile.exe' });
    expect(parseSha256File("<html>", "x")).toEqual({ refusal: "x.sha256 is not a sha256sum line" });
  });
});

test("the embedded key: empty means no key, a wrong length is refused", () => {
  expect(decodePublicKey("")).toEqual({ refusal: "this build has no embedded release key" });
  expect(decodePublicKey(Buffer.alloc(31).toString("base64"))).toEqual({ refusal: "the embedded release key is 31 bytes, not 32" });
  expect("key" in decodePublicKey(Buffer.alloc(32, 1).toString("base64"))).toBe(true);
  expect(typeof PUBLIC_KEY_BASE64).toBe("string");
});

describe("the release statement a signature covers", () => {
  const hex = "0123456789abcdef".repeat(4);
  test("exactly four ASCII lines, each ended by \\n", () => {
    expect(releaseStatement("v1.2.3", "gpu-turnstile-linux-x64", hex)).toBe(
      `gpu-turnstile release v1\nv1.2.3\ngpu-turnstile-linux-x64\n${hex}\n`,
    );
  });
  test("a field that could pose as the next line, or a digest that is not lower-case hex, is refused", () => {
    expect(statementRefusal("v1.2.3\ngpu-turnstile.exe", "x")).toBe('tag "v1.2.3\\ngpu-turnstile.exe" is not printable ASCII');
    expect(statementRefusal("v1.2.3", "gpu-turnstile\r")).toBe('asset name "gpu-turnstile\\r" is not printable ASCII');
    expect(statementRefusal("v1.2.3", "gpü")).toMatch(/not printable ASCII/);
    expect(statementRefusal("", "x")).toMatch(/tag "" is not printable ASCII/);
    expect(statementRefusal("v1.2.3", "gpu turnstile.exe")).toBeNull();
    expect(() => releaseStatement("v1.2.3\n", "x", hex)).toThrow(/cannot build a release statement: tag/);
    expect(() => releaseStatement("v1.2.3", "x", hex.toUpperCase())).toThrow(/SHA-256 .* is not 64 lower-case hex digits/);
    expect(() => releaseStatement("v1.2.3", "x", hex.slice(1))).toThrow(/not 64 lower-case hex digits/);
  });
});
