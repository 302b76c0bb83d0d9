/** STATE_DIR left empty: the folder a service gets for its state, else one beside the config. */
import { expect, test } from "bun:test";
import { defaultStateDir } from "../../src/config/state-dir.ts";

const linux = { os: "linux" as NodeJS.Platform, arch: "x64" };
const windows = { os: "win32" as NodeJS.Platform, arch: "x64" };

test("under systemd: its StateDirectory (the first, when the unit names several)", () => {
  const env = { STATE_DIRECTORY: "/var/lib/gpu-turnstile:/var/lib/other" };
  expect(defaultStateDir({ env, platform: linux, configFile: "/etc/gpu-turnstile/gpu-turnstile.env", home: "/root" })).toBe("/var/lib/gpu-turnstile");
});

test("on Windows: ProgramData, where install-service keeps the service's data", () => {
  expect(defaultStateDir({ env: { ProgramData: "D:\\PD" }, platform: windows, configFile: "C:\\x\\gpu-turnstile.env", home: "C:\\Users\\a" })).toBe(
    "D:\\PD\\gpu-turnstile",
  );
  expect(defaultStateDir({ env: {}, platform: windows, configFile: undefined, home: "C:\\Users\\a" })).toBe("C:\\ProgramData\\gpu-turnstile");
});

test("elsewhere: beside the config file; without one, the user's XDG state folder", () => {
  expect(defaultStateDir({ env: {}, platform: linux, configFile: "/opt/gt/gpu-turnstile.env", home: "/home/a" })).toBe("/opt/gt/gpu-turnstile-state");
  expect(defaultStateDir({ env: {}, platform: linux, configFile: undefined, home: "/home/a" })).toBe("/home/a/.local/state/gpu-turnstile");
  expect(defaultStateDir({ env: { XDG_STATE_HOME: "/s" }, platform: linux, configFile: undefined, home: "/home/a" })).toBe("/s/gpu-turnstile");
});
