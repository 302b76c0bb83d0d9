/**
 * Which SERVICE_STATUS to report to the Windows service control manager, and when. Pure: events
 * in, status reports out; windows-scm.ts does the FFI. The rules (from the SCM documentation):
 *
 * - ServiceMain was called → START_PENDING, accepting nothing, with a checkpoint and a wait hint.
 * - While a state is pending, the checkpoint must grow within each wait hint, or the SCM decides
 *   the service hung; "tick" does that.
 * - Listening → RUNNING, accepting STOP and SHUTDOWN.
 * - STOP or SHUTDOWN → STOP_PENDING and one stop request to the application.
 * - The process is about to exit → STOPPED. A non-zero exit code is reported as
 *   ERROR_SERVICE_SPECIFIC_ERROR with the code, which (with `sc failureflag … 1`) makes the SCM
 *   run the recovery actions: that is how an update's exit code 3 becomes a restart.
 */

export const SERVICE_WIN32_OWN_PROCESS = 0x10;

export const SERVICE_STOPPED = 1;
export const SERVICE_START_PENDING = 2;
export const SERVICE_STOP_PENDING = 3;
export const SERVICE_RUNNING = 4;

export const SERVICE_ACCEPT_STOP = 0x1;
export const SERVICE_ACCEPT_SHUTDOWN = 0x4;

export const SERVICE_CONTROL_STOP = 0x1;
export const SERVICE_CONTROL_INTERROGATE = 0x4;
export const SERVICE_CONTROL_SHUTDOWN = 0x5;

export const NO_ERROR = 0;
export const ERROR_CALL_NOT_IMPLEMENTED = 120;
export const ERROR_SERVICE_SPECIFIC_ERROR = 1066;

/** The SERVICE_STATUS fields, in struct order (dwServiceType first). */
export interface ServiceStatus {
  serviceType: number;
  currentState: number;
  controlsAccepted: number;
  win32ExitCode: number;
  serviceSpecificExitCode: number;
  checkPoint: number;
  waitHint: number;
}

export type Phase = "idle" | "starting" | "running" | "stopping" | "stopped";

export interface ScmState {
  phase: Phase;
  checkPoint: number;
  /** the status last reported (INTERROGATE repeats it) */
  last?: ServiceStatus;
}

export type ScmEvent =
  /** the SCM called ServiceMain */
  | { type: "main" }
  /** every listener is bound */
  | { type: "ready" }
  /** the control handler was called */
  | { type: "control"; code: number }
  /** the application began shutting down on its own (fatal error, update) */
  | { type: "stopping" }
  /** a timer while a state is pending */
  | { type: "tick" }
  /** the process is about to exit */
  | { type: "stopped"; exitCode: number };

export interface StepResult {
  state: ScmState;
  /** pass to SetServiceStatus; undefined = report nothing */
  report?: ServiceStatus;
  /** true exactly once: the SCM asked us to stop, start the graceful shutdown */
  requestStop: boolean;
  /** what the control handler should return (for "control" events) */
  handlerResult: number;
}

export interface WaitHints {
  /** how long starting may take before the SCM gives up (checkpoints extend it) */
  startMs: number;
  /** how long stopping may take: the graceful-shutdown timeout plus a margin */
  stopMs: number;
}

export const DEFAULT_WAIT_HINTS: WaitHints = { startMs: 30_000, stopMs: 30_000 };

export const initialScmState: ScmState = { phase: "idle", checkPoint: 0 };

export function scmStep(state: ScmState, event: ScmEvent, hints: WaitHints = DEFAULT_WAIT_HINTS): StepResult {
  const none = (): StepResult => ({ state, requestStop: false, handlerResult: NO_ERROR });
  const to = (phase: Phase, currentState: number, extra: Partial<ServiceStatus> = {}, requestStop = false): StepResult => {
    const pending = currentState === SERVICE_START_PENDING || currentState === SERVICE_STOP_PENDING;
    const checkPoint = pending ? (state.phase === phase ? state.checkPoint + 1 : 1) : 0;
    const report: ServiceStatus = {
      serviceType: SERVICE_WIN32_OWN_PROCESS,
      currentState,
      controlsAccepted: currentState === SERVICE_RUNNING ? SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN : 0,
      win32ExitCode: NO_ERROR,
      serviceSpecificExitCode: 0,
      checkPoint,
      waitHint: currentState === SERVICE_START_PENDING ? hints.startMs : currentState === SERVICE_STOP_PENDING ? hints.stopMs : 0,
      ...extra,
    };
    return { state: { phase, checkPoint, last: report }, report, requestStop, handlerResult: NO_ERROR };
  };

  switch (event.type) {
    case "main":
      return state.phase === "idle" ? to("starting", SERVICE_START_PENDING) : none();
    case "tick":
      if (state.phase === "starting") return to("starting", SERVICE_START_PENDING);
      if (state.phase === "stopping") return to("stopping", SERVICE_STOP_PENDING);
      return none();
    case "ready":
      return state.phase === "starting" ? to("running", SERVICE_RUNNING) : none();
    case "stopping":
      return state.phase === "starting" || state.phase === "running" ? to("stopping", SERVICE_STOP_PENDING) : none();
    case "stopped": {
      if (state.phase === "stopped" || state.phase === "idle") return none();
      const failed = event.exitCode !== 0;
      return to("stopped", SERVICE_STOPPED, {
        win32ExitCode: failed ? ERROR_SERVICE_SPECIFIC_ERROR : NO_ERROR,
        serviceSpecificExitCode: failed ? event.exitCode >>> 0 : 0,
      });
    }
    case "control":
      if (event.code === SERVICE_CONTROL_STOP || event.code === SERVICE_CONTROL_SHUTDOWN) {
        if (state.phase === "starting" || state.phase === "running") return to("stopping", SERVICE_STOP_PENDING, {}, true);
        return none();
      }
      if (event.code === SERVICE_CONTROL_INTERROGATE) return { ...none(), report: state.last };
      return { ...none(), handlerResult: ERROR_CALL_NOT_IMPLEMENTED };
  }
}

/** The 28-byte SERVICE_STATUS struct (seven DWORDs) for SetServiceStatus. */
export function encodeStatus(s: ServiceStatus, into: Uint32Array = new Uint32Array(7)): Uint32Array {
  into.set([s.serviceType, s.currentState, s.controlsAccepted, s.win32ExitCode, s.serviceSpecificExitCode, s.checkPoint, s.waitHint]);
  return into;
}
