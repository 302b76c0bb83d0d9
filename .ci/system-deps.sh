#!/usr/bin/env bash
# Debian packages the test suite uses. Each is optional for a developer (tests that need one skip
# with a note), but CI installs them so every test runs.
set -u
want=()
command -v systemd-analyze >/dev/null || want+=(systemd)
if ((${#want[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi
exit 0
