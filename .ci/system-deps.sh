#!/usr/bin/env bash
# Debian packages the test suite uses. Each is optional for a developer (tests that need one skip
# with a note), but CI installs them so every test runs. A failed install never fails CI: the
# tests that needed the package skip with their note.
#   systemd                                  systemd-analyze verify of the rendered unit
#   wine64, gcc-mingw-w64-x86-64-win32       test/service/wine-smoke.test.ts: the Windows exe as a
#                                            service under wine (~200 MB download, ~1 min; mingw
#                                            builds the stub bcryptprimitives.dll wine 8 lacks)
#   chromium                                 test/status/page-browser.test.ts: the status page in a
#                                            real headless browser, and its screenshot
#   haproxy                                  test/e2e/balance/haproxy.test.ts: deploy/haproxy.cfg in
#                                            front of two turnstiles; bench scenario 8; demo --cards 2
#   nginx                                    test/e2e/balance/nginx.test.ts: deploy/nginx.conf likewise;
#                                            the bench's reference proxy
set -u
export DEBIAN_FRONTEND=noninteractive

groups=()
command -v systemd-analyze >/dev/null || groups+=("systemd")
{ [[ -x /usr/lib/wine/wine64 ]] || command -v wine64 >/dev/null; } && command -v x86_64-w64-mingw32-gcc >/dev/null ||
  groups+=("wine64 gcc-mingw-w64-x86-64-win32")
[[ -x /usr/bin/chromium ]] || groups+=("chromium")
command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] || groups+=("haproxy")
command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || groups+=("nginx")

if ((${#groups[@]})); then
  if apt-get update -qq; then
    # One install per group, so a package that cannot be had costs only the tests that need it.
    for g in "${groups[@]}"; do
      # shellcheck disable=SC2086 # a group is a space-separated package list
      apt-get install -y -qq --no-install-recommends $g >/dev/null ||
        echo "system-deps: could not install $g; the tests that need it will skip" >&2
    done
  else
    echo "system-deps: apt-get update failed; tests needing ${groups[*]} will skip" >&2
  fi
fi
exit 0
