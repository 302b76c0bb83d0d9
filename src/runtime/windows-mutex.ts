/**
 * The Windows half of the card claim's authority: a named mutex in the `Global\` namespace, one per
 * machine across sessions (the service's and the desktop's). A named pipe alone is not enough:
 * whether a second process may open another instance of a pipe name depends on the first
 * instance's flags, and wine lets both listen. Windows closes the handle when its process dies,
 * `kill` included, so a successor claims at once. Imported lazily: Linux never dlopens kernel32.
 */
import { dlopen, ptr } from "bun:ffi";

const ERROR_ACCESS_DENIED = 5;
const ERROR_ALREADY_EXISTS = 183;

let kernel32: ReturnType<typeof open> | undefined;
function open() {
  return dlopen("kernel32.dll", {
    CreateMutexW: { args: ["ptr", "i32", "ptr"], returns: "ptr" },
    GetLastError: { args: [], returns: "u32" },
    CloseHandle: { args: ["ptr"], returns: "i32" },
  });
}

/** Holds `Global\<name>` until `release`; "taken" when another process holds it (or may not be opened by us). */
export function claimMutex(name: string): { release(): void } | "taken" {
  const k = (kernel32 ??= open()).symbols;
  const wide = Buffer.from(`Global\\${name}\0`, "utf16le");
  const handle = k.CreateMutexW(null, 0, ptr(wide));
  const error = k.GetLastError();
  // A mutex the service (LocalSystem) created cannot be opened by a user: someone holds it.
  if (handle === null) {
    if (error === ERROR_ACCESS_DENIED) return "taken";
    throw new Error(`CreateMutexW(Global\\${name}) failed (error ${error})`);
  }
  if (error === ERROR_ALREADY_EXISTS) {
    k.CloseHandle(handle);
    return "taken";
  }
  let held = true;
  return {
    release() {
      if (held) k.CloseHandle(handle);
      held = false;
    },
  };
}
