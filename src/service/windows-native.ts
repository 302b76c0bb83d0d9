/**
 * The few Win32 calls outside the SCM protocol: admin check and console ownership. Windows-only;
 * imported lazily (dynamic import behind a platform check) so Linux never dlopens these DLLs.
 */
import { dlopen } from "bun:ffi";

let shell32: ReturnType<typeof openShell32> | undefined;
let kernel32: ReturnType<typeof openKernel32> | undefined;

function openShell32() {
  return dlopen("shell32.dll", { IsUserAnAdmin: { args: [], returns: "i32" } });
}

function openKernel32() {
  return dlopen("kernel32.dll", { GetConsoleProcessList: { args: ["ptr", "u32"], returns: "u32" } });
}

/** True when this process runs with an elevated (administrator) token. */
export function isUserAnAdmin(): boolean {
  shell32 ??= openShell32();
  return shell32.symbols.IsUserAnAdmin() !== 0;
}

/**
 * How many processes share our console: 1 means the console was created for us alone — we were
 * started from Explorer (double-click) and the window closes when we exit. 0 = no console (a
 * service); 2+ = started from a shell that keeps the window open.
 */
export function consoleProcessCount(): number {
  kernel32 ??= openKernel32();
  const list = new Uint32Array(8);
  return kernel32.symbols.GetConsoleProcessList(list, list.length);
}

/** A NUL-terminated UTF-16LE copy of `s`, as Win32's W functions want. Keep it referenced while in use. */
export function wide(s: string): Uint16Array {
  const out = new Uint16Array(s.length + 1);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
