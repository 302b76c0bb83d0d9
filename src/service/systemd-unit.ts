/**
 * The systemd unit, as text, and the small parser the installer uses to tell whether an
 * installed unit drifted from the one this version would write.
 */

export const UNIT_NAME = "gpu-turnstile.service";

export interface UnitOptions {
  /** absolute path of the binary systemd starts */
  execPath: string;
  /** absolute path of the env file handed to systemd's EnvironmentFile= */
  configPath: string;
}

/**
 * Renders the unit. Choices beyond the SPEC's list, and why:
 *
 * - `EnvironmentFile=-…` (with the dash): a missing file is not systemd's business. Without the
 *   dash systemd refuses to start with a generic "Failed to load environment files"; with it the
 *   binary starts, and our own config check names what is missing ("set OLLAMA_URL or
 *   COMFY_URL") in the journal. It also lets a `--no-copy` install with no config yet be
 *   configured later, or entirely through `systemctl edit` drop-ins. `install-service` writes
 *   the file anyway, so in the normal case the dash changes nothing.
 * - No `--config` on ExecStart: systemd (as root) reads the env file and hands the values over
 *   as environment, so the sandboxed DynamicUser never needs read access to /etc.
 * - `MemoryDenyWriteExecute=` is left out: Bun's JavaScriptCore JIT and bun:ffi both need
 *   memory that is writable and executable. Under it (tested with both the seccomp filter
 *   systemd 252 installs and the kernel's PR_SET_MDWE that newer systemd uses, see
 *   test/service/sandbox.test.ts) Bun silently falls back to the interpreter (hot JS ~100x
 *   slower) and `bun:ffi` throws "bun:ffi requires the JIT", so sd_notify could never send
 *   READY=1 and every start of this Type=notify unit would time out.
 */
export function renderUnit(opts: UnitOptions): string {
  return `# Written by gpu-turnstile install-service; re-running the install rewrites it.
# Put local changes in a drop-in instead: systemctl edit gpu-turnstile
[Unit]
Description=gpu-turnstile: one GPU shared by Ollama and ComfyUI
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
ExecStart=${execArg(opts.execPath)}
# "-": a missing file is reported by gpu-turnstile itself, with the setting it needs.
EnvironmentFile=-${escapeSpecifiers(opts.configPath)}
# Bun reads its fetch concurrency limit (default 256) only at process start.
Environment=BUN_CONFIG_MAX_HTTP_REQUESTS=65535
Restart=on-failure
RestartSec=5s
WatchdogSec=30

DynamicUser=yes
StateDirectory=gpu-turnstile
# The one other writable place: LOG_FILE=/var/log/gpu-turnstile/gpu-turnstile.log works.
LogsDirectory=gpu-turnstile
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
NoNewPrivileges=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
RestrictNamespaces=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
# No MemoryDenyWriteExecute=yes: Bun's JIT and bun:ffi (used for sd_notify) need W+X memory;
# under it the JIT is silently disabled and READY=1 can never be sent.
CapabilityBoundingSet=
AmbientCapabilities=
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
SystemCallFilter=@system-service

[Install]
WantedBy=multi-user.target
`;
}

/** `%` starts a specifier in every unit setting; `$` expands variables on ExecStart only. */
function escapeSpecifiers(s: string): string {
  return s.replace(/%/g, "%%");
}

function execArg(path: string): string {
  const escaped = escapeSpecifiers(path).replace(/\$/g, "$$$$");
  if (!/[\s"'\\;]/.test(escaped)) return escaped;
  return `"${escaped.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

export interface UnitEntry {
  section: string;
  key: string;
  value: string;
}

/**
 * Reads unit-file text into its settings, in order. Comments and blank lines are dropped, so two
 * units that differ only there compare equal; line continuations (`\` at the end) are joined.
 */
export function parseUnit(text: string): UnitEntry[] {
  const entries: UnitEntry[] = [];
  let section = "";
  let pending = "";
  for (const raw of text.split(/\r?\n/)) {
    let line = pending + raw.trim();
    pending = "";
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    if (line.endsWith("\\")) {
      pending = `${line.slice(0, -1)} `;
      continue;
    }
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1]!;
      continue;
    }
    const eq = line.indexOf("=");
    if (eq < 0) continue; // systemd ignores such lines with a warning; so do we
    line = line.trimEnd();
    entries.push({ section, key: line.slice(0, eq).trim(), value: line.slice(eq + 1).trim() });
  }
  return entries;
}

/** The last value of a setting (systemd's rule for single-valued settings), or undefined. */
export function unitValue(entries: readonly UnitEntry[], section: string, key: string): string | undefined {
  let found: string | undefined;
  for (const e of entries) if (e.section === section && e.key === key) found = e.value;
  return found;
}

/**
 * What differs between an installed unit and the wanted one, one human line per setting
 * ("[Service] ExecStart: /old → /new", "[Service] WatchdogSec: missing, want 30"). Empty = no
 * drift. Settings are compared by their ordered list of values (repeated keys count), with runs
 * of whitespace treated as one.
 */
export function diffUnits(installed: readonly UnitEntry[], wanted: readonly UnitEntry[]): string[] {
  const group = (entries: readonly UnitEntry[]) => {
    const m = new Map<string, string[]>();
    for (const e of entries) {
      const id = `[${e.section}] ${e.key}`;
      m.set(id, [...(m.get(id) ?? []), e.value]);
    }
    return m;
  };
  const have = group(installed);
  const want = group(wanted);
  const out: string[] = [];
  const show = (vs: string[]) => vs.map((v) => (v === "" ? '""' : v)).join(", ");
  for (const [id, values] of want) {
    const old = have.get(id);
    if (!old) out.push(`${id}: missing, want ${show(values)}`);
    else if (old.map(squash).join("\n") !== values.map(squash).join("\n")) out.push(`${id}: ${show(old)} → ${show(values)}`);
  }
  for (const [id, values] of have) if (!want.has(id)) out.push(`${id}: ${show(values)} is not wanted`);
  return out;
}

/** Runs of whitespace are one separator in list settings; a joined continuation leaves two. */
function squash(value: string): string {
  return value.replace(/\s+/g, " ");
}

/** Parses the first word of ExecStart= back into a path (undoing execArg's quoting). */
export function execPathOf(entries: readonly UnitEntry[]): string | undefined {
  const v = unitValue(entries, "Service", "ExecStart");
  if (v === undefined) return undefined;
  const unprefixed = v.replace(/^[-@:+!]+/, "");
  let path: string;
  if (unprefixed.startsWith('"')) {
    const m = /^"((?:[^"\\]|\\.)*)"/.exec(unprefixed);
    path = m ? m[1]!.replace(/\\(.)/g, "$1") : unprefixed;
  } else {
    path = unprefixed.split(/\s+/)[0] ?? "";
  }
  return path.replace(/\$\$/g, "$").replace(/%%/g, "%");
}

/** A directory the unit's own sandbox hides from the service, and the setting that hides it. */
export interface HiddenDir {
  dir: string;
  by: string;
}

/**
 * The directories a unit's sandbox hides from its service, read from the unit itself so the list
 * cannot drift from what renderUnit writes (systemd.exec(5)): ProtectHome=yes/tmpfs empties /home,
 * /root and /run/user; PrivateTmp=yes gives the service its own /tmp and /var/tmp;
 * InaccessiblePaths= and TemporaryFileSystem= hide what they name. ProtectHome=read-only and
 * ProtectSystem= only make things read-only, which a binary and a config can live with.
 */
export function hiddenBySandbox(entries: readonly UnitEntry[]): HiddenDir[] {
  const out: HiddenDir[] = [];
  const yes = (v: string | undefined) => v !== undefined && /^(yes|true|on|1)$/i.test(v);
  const home = unitValue(entries, "Service", "ProtectHome");
  if (yes(home) || home === "tmpfs") for (const dir of ["/home", "/root", "/run/user"]) out.push({ dir, by: `ProtectHome=${home}` });
  const tmp = unitValue(entries, "Service", "PrivateTmp");
  if (yes(tmp)) for (const dir of ["/tmp", "/var/tmp"]) out.push({ dir, by: `PrivateTmp=${tmp}` });
  for (const e of entries) {
    if (e.section !== "Service" || (e.key !== "InaccessiblePaths" && e.key !== "TemporaryFileSystem")) continue;
    for (const word of e.value.split(/\s+/).filter(Boolean)) {
      const dir = word.replace(/^[-+]+/, "").replace(/:.*$/, "").replace(/\/+$/, "");
      if (dir.startsWith("/")) out.push({ dir, by: `${e.key}=${e.value}` });
    }
  }
  return out;
}

/** The hidden directory `path` lies in, or undefined. */
export function hiddenDirOf(path: string, hidden: readonly HiddenDir[]): HiddenDir | undefined {
  return hidden.find((h) => path === h.dir || path.startsWith(`${h.dir}/`));
}
