/**
 * One update attempt, shared by the background updater and --force-update:
 * release → decision → asset + .sig (+ .sha256) → verify → stage. It never throws; the outcome
 * says what happened, and for anything refused, exactly why.
 */
import type { Config } from "../config/types.ts";
import { UNSTAMPED_VERSION } from "../version.ts";
import { channelFor, decide } from "./decide.ts";
import type { Channel } from "./decide.ts";
import { fetchLimited } from "./download.ts";
import { fetchRelease, parseRepoUrl } from "./gitea.ts";
import type { Release, ReleaseAsset } from "./gitea.ts";
import { PUBLIC_KEY_BASE64 } from "./pubkey.ts";
import { StagingFailed, stageBinary } from "./stage.ts";
import type { StageFs } from "./stage.ts";
import type { FetchFn, UpdateLog } from "./types.ts";
import { UpdateRefused } from "./types.ts";
import { SIGNATURE_BYTES, decodePublicKey, verifyAsset } from "./verify.ts";

export interface Limits {
  /** the binary itself (~110 MiB today) */
  assetBytes: number;
  sha256Bytes: number;
}

export const DEFAULT_LIMITS: Limits = { assetBytes: 256 * 1024 * 1024, sha256Bytes: 4096 };

export interface CheckContext {
  config: Pick<Config, "appVer" | "updateRepo" | "updateAsset">;
  /** the running binary's VERSION */
  version: string;
  /** the running executable (process.execPath), replaced on success */
  execPath: string;
  log: UpdateLog;
  signal: AbortSignal;
  fetch?: FetchFn;
  /** defaults to the embedded PUBLIC_KEY_BASE64 */
  publicKeyBase64?: string;
  limits?: Partial<Limits>;
  stageFs?: StageFs;
}

export type CheckOutcome =
  /** this process will never update (the reason is the same on every attempt) */
  | { status: "disabled"; reason: string }
  | { status: "current"; reason: string }
  | { status: "staged"; tag: string; reason: string }
  /** `staging`: the release was fine, writing it to this machine's disk was not */
  | { status: "failed"; reason: string; needsElevation: boolean; staging: boolean };

export interface Blocker {
  reason: string;
  /** a defect of the build itself (no usable key), not a setting the operator chose */
  defect: boolean;
}

type Ready = { key: Uint8Array; channel: Exclude<Channel, { kind: "off" }> };

/** Everything decided before any network traffic: a reason never to update, or what to check with. */
function readiness(ctx: Pick<CheckContext, "config" | "version" | "publicKeyBase64">): { blocker: Blocker } | Ready {
  const key = decodePublicKey(ctx.publicKeyBase64 ?? PUBLIC_KEY_BASE64);
  if ("refusal" in key) return { blocker: { reason: `updates disabled: ${key.refusal}`, defect: true } };
  const channel = channelFor(ctx.config.appVer);
  if (channel.kind === "off") return { blocker: { reason: channel.reason, defect: false } };
  // From source, process.execPath is the bun runtime itself: never "update" that.
  if (ctx.version === UNSTAMPED_VERSION) {
    return { blocker: { reason: "updates disabled: running from source (no version stamp)", defect: false } };
  }
  return { key: key.key, channel };
}

/** Why this process may never update, or null. */
export function updateBlocker(ctx: Pick<CheckContext, "config" | "version" | "publicKeyBase64">): Blocker | null {
  const r = readiness(ctx);
  return "blocker" in r ? r.blocker : null;
}

export async function checkOnce(ctx: CheckContext): Promise<CheckOutcome> {
  const ready = readiness(ctx);
  if ("blocker" in ready) return { status: "disabled", reason: ready.blocker.reason };
  try {
    return await attempt(ctx, ready);
  } catch (err) {
    if (err instanceof UpdateRefused) {
      return { status: "failed", reason: err.message, needsElevation: err.needsElevation, staging: err instanceof StagingFailed };
    }
    const reason = `unexpected error: ${err instanceof Error ? err.message : String(err)}`;
    return { status: "failed", reason, needsElevation: false, staging: false };
  }
}

async function attempt(ctx: CheckContext, { key, channel }: Ready): Promise<CheckOutcome> {
  // decide() would say the same after a request; a pinned install need not ask every interval.
  if (channel.kind === "pin" && channel.tag === ctx.version) {
    return { status: "current", reason: `up to date: running the pinned ${ctx.version}` };
  }
  const assetName = ctx.config.updateAsset;
  if (assetName === "" || /[/\\]/.test(assetName) || assetName === "." || assetName === "..") {
    throw new UpdateRefused(`asset name ${JSON.stringify(assetName)} is not a plain file name`);
  }
  const repo = parseRepoUrl(ctx.config.updateRepo);
  const net = { fetch: ctx.fetch ?? fetch, signal: ctx.signal, userAgent: `gpu-turnstile/${ctx.version}` };
  const release = await fetchRelease(repo, channel.kind === "pin" ? { kind: "tag", tag: channel.tag } : { kind: "latest" }, net);

  const decision = decide(channel, ctx.version, release);
  if (decision.action === "skip") return { status: "current", reason: decision.reason };
  if (decision.action === "refuse") throw new UpdateRefused(decision.reason);
  ctx.log.info("update found", { tag: release.tag, reason: decision.reason, asset: assetName });

  const limits = { ...DEFAULT_LIMITS, ...ctx.limits };
  const asset = findAsset(release, assetName);
  if (!asset) throw new UpdateRefused(`release ${release.tag} has no asset ${assetName}`);
  const sigAsset = findAsset(release, `${assetName}.sig`);
  if (!sigAsset) throw new UpdateRefused(`release ${release.tag} has no signature ${assetName}.sig: refusing an unsigned binary`);
  const shaAsset = findAsset(release, `${assetName}.sha256`);

  const get = (a: ReleaseAsset, maxBytes: number, exactBytes?: number): Promise<Uint8Array> =>
    fetchLimited(a.url, { ...net, what: `${release.tag} ${a.name}`, allowedHost: repo.host, maxBytes, exactBytes });
  // Small files first: a missing or malformed signature should not cost a 100 MiB download.
  const signature = await get(sigAsset, SIGNATURE_BYTES, SIGNATURE_BYTES);
  const sha256File = shaAsset ? new TextDecoder().decode(await get(shaAsset, limits.sha256Bytes)) : undefined;
  const bytes = await get(asset, limits.assetBytes, asset.size);

  // The tag this attempt acts on: the signature must be for it, not merely for these bytes.
  const verified = verifyAsset({ tag: release.tag, assetName, asset: bytes, signature, sha256File, publicKey: key });
  if ("refusal" in verified) throw new UpdateRefused(`${release.tag}: ${verified.refusal}`);
  ctx.log.info("update verified", { tag: release.tag, asset: assetName, bytes: bytes.byteLength, sha256: verified.sha256 });

  stageBinary(ctx.execPath, { bytes, sha256: verified.sha256 }, ctx.stageFs);
  return { status: "staged", tag: release.tag, reason: decision.reason };
}

function findAsset(release: Release, name: string): ReleaseAsset | undefined {
  return release.assets.find((a) => a.name === name);
}
