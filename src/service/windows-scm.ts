/**
 * Speaks the Windows service protocol when the SCM starts us. Windows-only: load it with a
 * dynamic import() behind a platform check (index.ts does).
 *
 * StartServiceCtrlDispatcherW blocks its thread until the service has stopped, so it runs on a
 * native thread of its own (CreateThread pointed straight at the function: on x64 and arm64 its
 * signature is compatible with a thread start routine) and the JS event loop stays free.
 * ServiceMain and the control handler are thread-safe JSCallbacks: Windows calls them on its own
 * threads, Bun queues the call onto the JS thread and returns at once. That has two consequences
 * the design relies on:
 * - ServiceMain returns before our JS runs. That is allowed: the dispatcher keeps running until
 *   the service reports SERVICE_STOPPED; we register the control handler from the JS thread.
 * - The handler's return value never reaches Windows (the native side returns 0 = NO_ERROR).
 *   We accept only STOP and SHUTDOWN (plus INTERROGATE, always sent), for which NO_ERROR is
 *   the right answer anyway.
 * Which status to report when lives in windows-scm-state.ts, which is unit-tested.
 */
import { dlopen, JSCallback, ptr, type Pointer } from "bun:ffi";
import type { ServiceHost } from "./host.ts";
import { wide } from "./windows-native.ts";
import {
  DEFAULT_WAIT_HINTS,
  encodeStatus,
  initialScmState,
  scmStep,
  type ScmEvent,
  type ScmState,
  type WaitHints,
} from "./windows-scm-state.ts";

const STILL_ACTIVE = 259;
/** how often a pending state's checkpoint is raised; well inside any wait hint */
const TICK_MS = 2_000;

export interface ScmOptions {
  serviceName: string;
  hints?: WaitHints;
  /** how long to wait for the SCM to call ServiceMain (it gives us 30 s to connect) */
  connectTimeoutMs?: number;
}

function openApis() {
  const advapi32 = dlopen("advapi32.dll", {
    RegisterServiceCtrlHandlerExW: { args: ["ptr", "ptr", "ptr"], returns: "ptr" },
    SetServiceStatus: { args: ["ptr", "ptr"], returns: "i32" },
  });
  const kernel32 = dlopen("kernel32.dll", {
    LoadLibraryW: { args: ["ptr"], returns: "ptr" },
    GetProcAddress: { args: ["ptr", "ptr"], returns: "ptr" },
    CreateThread: { args: ["ptr", "u64", "ptr", "ptr", "u32", "ptr"], returns: "ptr" },
    GetExitCodeThread: { args: ["ptr", "ptr"], returns: "i32" },
    CloseHandle: { args: ["ptr"], returns: "i32" },
    GetLastError: { args: [], returns: "u32" },
  });
  return { advapi32: advapi32.symbols, kernel32: kernel32.symbols };
}

/**
 * Everything native code may still read after this function returns: the service table, the
 * name, the status buffer and both callbacks. Module-level so the GC can never free them while
 * the dispatcher thread runs (until the process exits).
 */
const pinned: unknown[] = [];

/**
 * Connects to the SCM and returns a host once ServiceMain has been called and the service
 * reports START_PENDING. Rejects when the dispatcher cannot connect (the exe was started with the
 * service flag from a console: ERROR_FAILED_SERVICE_CONTROLLER_CONNECT) or the SCM never calls.
 */
export async function connectToScm(opts: ScmOptions): Promise<ServiceHost> {
  const hints = opts.hints ?? DEFAULT_WAIT_HINTS;
  const { advapi32, kernel32 } = openApis();

  const name = wide(opts.serviceName);
  const status = new Uint32Array(7);
  let state: ScmState = initialScmState;
  let handle: Pointer | bigint | null = null;
  let stopHandler: (() => void) | undefined;
  let stopRequested = false;
  let ticker: ReturnType<typeof setInterval> | undefined;

  const apply = (event: ScmEvent): number => {
    const r = scmStep(state, event, hints);
    state = r.state;
    if (r.report && handle !== null) advapi32.SetServiceStatus(handle, encodeStatus(r.report, status));
    const pending = state.phase === "starting" || state.phase === "stopping";
    if (pending && ticker === undefined) {
      ticker = setInterval(() => apply({ type: "tick" }), TICK_MS);
      ticker.unref();
    } else if (!pending && ticker !== undefined) {
      clearInterval(ticker);
      ticker = undefined;
    }
    if (r.requestStop) {
      stopRequested = true;
      stopHandler?.();
    }
    return r.handlerResult;
  };

  const handler = new JSCallback(
    (control: number) => apply({ type: "control", code: control }),
    { args: ["u32", "u32", "ptr", "ptr"], returns: "u32", threadsafe: true },
  );

  let mainCalled!: () => void;
  const main = new Promise<void>((resolve) => (mainCalled = resolve));
  const serviceMain = new JSCallback(
    () => {
      handle = advapi32.RegisterServiceCtrlHandlerExW(name, handler.ptr, null);
      mainCalled();
    },
    { args: ["u32", "ptr"], returns: "void", threadsafe: true },
  );

  // SERVICE_TABLE_ENTRYW[2]: { lpServiceName, lpServiceProc } then the NULL terminator.
  const table = new BigUint64Array([BigInt(ptr(name)), BigInt(serviceMain.ptr ?? 0), 0n, 0n]);
  const dispatcherName = new TextEncoder().encode("StartServiceCtrlDispatcherW\0");
  pinned.push(name, status, handler, serviceMain, table, dispatcherName);

  const module = kernel32.LoadLibraryW(wide("advapi32.dll"));
  const dispatcher = module === null ? null : kernel32.GetProcAddress(module, dispatcherName);
  if (dispatcher === null) throw new Error("StartServiceCtrlDispatcherW not found in advapi32.dll");
  const thread = kernel32.CreateThread(null, 0, dispatcher, table, 0, null);
  if (thread === null) throw new Error(`CreateThread failed (error ${kernel32.GetLastError()})`);

  // Wait for ServiceMain, or for the dispatcher thread to give up (it returns FALSE at once
  // when this process was not started by the SCM).
  const exitCode = new Uint32Array(1);
  const deadline = Date.now() + (opts.connectTimeoutMs ?? 30_000);
  let poll: ReturnType<typeof setInterval> | undefined;
  const gaveUp = new Promise<string>((resolve) => {
    poll = setInterval(() => {
      if (kernel32.GetExitCodeThread(thread, exitCode) !== 0 && exitCode[0] !== STILL_ACTIVE) {
        resolve("the service control manager did not start this process (StartServiceCtrlDispatcher failed)");
      } else if (Date.now() > deadline) {
        resolve("the service control manager never called ServiceMain");
      }
    }, 50);
  });
  const outcome = await Promise.race([main.then(() => null), gaveUp]);
  clearInterval(poll);
  if (outcome !== null) {
    kernel32.CloseHandle(thread);
    throw new Error(outcome);
  }
  if (handle === null) throw new Error(`RegisterServiceCtrlHandlerExW failed (error ${kernel32.GetLastError()})`);
  apply({ type: "main" });
  // Every way out must end in STOPPED with the exit code, not only the graceful stop: a config
  // error or a port in use ends in process.exit(1) (src/cli/serve.ts) without telling the host.
  // Unreported, wine's SCM shows START_PENDING for good (the wine smoke test saw it) and Windows'
  // SCM learns only that the process vanished, not its code. After host.stopped() this does nothing.
  process.once("exit", (code) => void apply({ type: "stopped", exitCode: code }));

  return {
    kind: "windows-service",
    ready: () => void apply({ type: "ready" }),
    status: () => {},
    stopping: () => void apply({ type: "stopping" }),
    stopped: (code) => void apply({ type: "stopped", exitCode: code }),
    onStopRequest: (h) => {
      stopHandler = h;
      // A STOP that arrived before the application was listening for it still counts.
      if (stopRequested) h();
    },
  };
}
