/**
 * The Windows half of the card claim's authority: a named mutex in the `Global\` namespace, one per
 * machine across sessions (the service's and the desktop's). A named pipe alone is not enough:
 * whether a second process may open another instance of a pipe name depends on the first
 * instance's flags, and wine lets both listen. Imported lazily: Linux never dlopens kernel32.
 *
 * The claim is ownership, not creation: the mutex is opened (made if new) and waited on without
 * waiting. Only its owner gets it; one whose owner died (`kill` included) comes back abandoned and is
 * ours at once. This needs no GetLastError() after CreateMutexW — a separate FFI call, which any
 * Win32 call the runtime makes in between could reset, turning "already exists" into "made it".
 */
import { dlopen, ptr } from "bun:ffi";

const ERROR_ACCESS_DENIED = 5;
const WAIT_OBJECT_0 = 0;
const WAIT_ABANDONED = 0x80;

let kernel32: ReturnType<typeof open> | undefined;
function open() {
  return dlopen("kernel32.dll", {
    CreateMutexW: { args: ["ptr", "i32", "ptr"], returns: "ptr" },
    WaitForSingleObject: { args: ["ptr", "u32"], returns: "u32" },
    ReleaseMutex: { args: ["ptr"], returns: "i32" },
    GetLastError: { args: [], returns: "u32" },
    CloseHandle: { args: ["ptr"], returns: "i32" },
  });
}

/** Owns `Global\<name>` until `release`; "taken" when another process owns it (or may not open it). */
export function claimMutex(name: string): { release(): void } | "taken" {
  const k = (kernel32 ??= open()).symbols;
  const wide = Buffer.from(`Global\\${name}\0`, "utf16le");
  const handle = k.CreateMutexW(null, 0, ptr(wide));
  if (handle === null) {
    const error = k.GetLastError();
    // A mutex the service (LocalSystem) made cannot be opened by a user: someone holds it.
    if (error === ERROR_ACCESS_DENIED) return "taken";
    throw new Error(`CreateMutexW(Global\\${name}) failed (error ${error})`);
  }
  const got = k.WaitForSingleObject(handle, 0);
  if (got !== WAIT_OBJECT_0 && got !== WAIT_ABANDONED) {
    k.CloseHandle(handle);
    return "taken";
  }
  let held = true;
  return {
    release() {
      if (!held) return;
      held = false;
      k.ReleaseMutex(handle);
      k.CloseHandle(handle);
    },
  };
}
