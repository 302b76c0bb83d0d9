#!/bin/sh
# Assemble the root filesystem of the FROM scratch image: the compiled binary, the shared
# libraries it links (as ldd resolves them, at the same paths: the loader's path is baked into
# the ELF), /etc/passwd and /etc/group with the non-root user 65532, CA certificates, and an
# empty /tmp. The Dockerfile and test/build/rootfs.test.ts both run this script, so what the test
# proves is what the image contains.
#
#   scripts/rootfs.sh <binary> <outdir>
set -eu

bin=${1:?usage: rootfs.sh <binary> <outdir>}
out=${2:?usage: rootfs.sh <binary> <outdir>}
ca=/etc/ssl/certs/ca-certificates.crt

[ -x "$bin" ] || { echo "rootfs: $bin is not an executable file" >&2; exit 1; }
[ -f "$ca" ] || { echo "rootfs: $ca is missing (install ca-certificates)" >&2; exit 1; }

mkdir -p "$out/etc/ssl/certs" "$out/tmp" "$out/proc" "$out/dev"
chmod 1777 "$out/tmp"
cp "$bin" "$out/gpu-turnstile"
chmod 0755 "$out/gpu-turnstile"

# "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" and "/lib64/ld-linux-x86-64.so.2 (0x…)";
# linux-vdso has no file. A library ldd cannot find fails the build instead of the container.
libs=$(ldd "$bin") || { echo "rootfs: ldd failed on $bin (a static binary needs no libraries; this one is not)" >&2; exit 1; }
if printf '%s\n' "$libs" | grep -q 'not found'; then
  echo "rootfs: missing shared libraries:" >&2
  printf '%s\n' "$libs" | grep 'not found' >&2
  exit 1
fi
printf '%s\n' "$libs" | awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }' |
  while IFS= read -r lib; do
    mkdir -p "$out$(dirname "$lib")"
    cp -L "$lib" "$out$lib"
  done

cat >"$out/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
turnstile:x:65532:65532:gpu-turnstile:/nonexistent:/sbin/nologin
PASSWD
cat >"$out/etc/group" <<'GROUP'
root:x:0:
turnstile:x:65532:
GROUP
# glibc's built-in default would try DNS before /etc/hosts; containers expect files first.
cat >"$out/etc/nsswitch.conf" <<'NSS'
passwd: files
group: files
hosts: files dns
NSS
cp -L "$ca" "$out/etc/ssl/certs/ca-certificates.crt"

echo "rootfs: $out ready ($(printf '%s\n' "$libs" | grep -c '/') shared libraries)"
