/**
 * What APP_VER asks for and whether a release answers it. Pure: no clock, no network.
 *
 *   dev     → never look
 *   stable  → the latest release, applied when its tag is a newer vX.Y.Z (a dev build, which
 *             cannot be ordered, is replaced by it)
 *   vX.Y.Z  → exactly that tag, applied on any difference, downgrades included
 */
import { compareVersions, isVersion } from "../config/version.ts";
import { isDevVersion } from "../version.ts";

export type Channel = { kind: "off"; reason: string } | { kind: "latest" } | { kind: "pin"; tag: string };

export function channelFor(appVer: string): Channel {
  if (appVer === "dev") return { kind: "off", reason: "APP_VER=dev: updates are off" };
  if (appVer === "stable") return { kind: "latest" };
  if (isVersion(appVer)) return { kind: "pin", tag: appVer };
  return { kind: "off", reason: `APP_VER=${JSON.stringify(appVer)} is none of dev, stable, vX.Y.Z: updates are off` };
}

export interface ReleaseFacts {
  tag: string;
  prerelease: boolean;
  draft: boolean;
}

/** skip = nothing to do (not an error); refuse = the server's answer makes no sense for the ask. */
export type Decision =
  | { action: "stage"; reason: string }
  | { action: "skip"; reason: string }
  | { action: "refuse"; reason: string };

export function decide(channel: Channel, current: string, release: ReleaseFacts): Decision {
  const tag = release.tag;
  if (channel.kind === "off") return { action: "skip", reason: channel.reason };
  if (release.draft) return { action: "refuse", reason: `release ${tag} is a draft` };
  if (channel.kind === "pin") {
    if (tag !== channel.tag) return { action: "refuse", reason: `asked for release ${channel.tag}, the server answered ${tag}` };
    if (current === tag) return { action: "skip", reason: `up to date: running the pinned ${tag}` };
    const direction = !isDevVersion(current) && compareVersions(tag, current) < 0 ? "downgrade" : "change";
    return { action: "stage", reason: `APP_VER pins ${tag}, running ${current} (${direction})` };
  }
  if (!isVersion(tag)) return { action: "refuse", reason: `latest release tag ${JSON.stringify(tag)} is not vX.Y.Z` };
  if (release.prerelease) return { action: "skip", reason: `latest release ${tag} is a pre-release` };
  if (isDevVersion(current)) return { action: "stage", reason: `${current} is a dev build; the latest release ${tag} replaces it` };
  const order = compareVersions(tag, current);
  if (order > 0) return { action: "stage", reason: `${tag} is newer than ${current}` };
  if (order === 0) return { action: "skip", reason: `up to date: ${current} is the latest release` };
  return { action: "skip", reason: `up to date: running ${current}, newer than the latest release ${tag}` };
}
