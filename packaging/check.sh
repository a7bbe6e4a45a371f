#!/usr/bin/env bash
# CI's check of the packages (.ci/run): builds the .deb (packaging/build-deb.sh, given this
# script's arguments: CI packages its test build, `--no-build --profile dev`), lintian (no
# errors), installs it with dpkg into a throwaway Debian root (the image's base, extracted; the
# CI machine itself is left alone), runs `ddpcheck --version`, `ddpcheckd check-config` and
# `ddpcheck config check` there, purges it and checks what is left; then builds the container
# image from the same .deb with buildah and runs `ddpcheck --version` inside it.
#
#   packaging/check.sh [--no-build] [--profile PROFILE]     (root: dpkg in a chroot, buildah)
set -euo pipefail
cd "$(dirname "$0")/.."
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
fail() { echo "packaging/check: $*" >&2; exit 1; }
step() { echo "-- $* ($((SECONDS))s)"; }

step "building the .deb"
deb=$(packaging/build-deb.sh "$@" | tail -n 1)
version=$(dpkg-deb --field "$deb" Version)
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
dpkg-deb --contents "$deb" | awk '{print $1, $2, $6}'

step "lintian"
lintian --fail-on error --display-level '>=warning' "$deb" ||
    fail "lintian found errors in $deb"

step "installing into a throwaway root"
rootfs=$(packaging/rootfs.sh)
root=$(mktemp -d "${TMPDIR:-/tmp}/ddpcheck-root.XXXXXX")
trap 'rm -rf "$root"' EXIT
tar -xf "$rootfs" -C "$root"
cp "$deb" "$root/tmp/ddpcheck.deb"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
in_root dpkg -i /tmp/ddpcheck.deb
# shellcheck disable=SC2016  # dpkg-query's own field names, not the shell's
in_root dpkg-query -W -f='${Package} ${Version} ${Status}\n' ddpcheck | grep -qx "ddpcheck $version install ok installed" ||
    fail "dpkg does not list ddpcheck $version as installed"
out=$(in_root ddpcheck --version)
echo "$out"
[ "$out" = "ddpcheck ${version%-*}" ] || fail "ddpcheck --version said: $out"
out=$(in_root ddpcheckd --version)
[ "$out" = "ddpcheckd ${version%-*}" ] || fail "ddpcheckd --version said: $out"
# The packaged configuration is the one check-config reads by default, and it is valid.
out=$(in_root ddpcheckd check-config)
echo "$out" | head -n 3
echo "$out" | grep -qx '# config file: /etc/ddpcheck/ddpcheck.toml (read)' ||
    fail "check-config did not read /etc/ddpcheck/ddpcheck.toml"
in_root ddpcheck config check >/dev/null || fail "ddpcheck config check failed"
# postinst: the user from sysusers, the unit enabled, nothing started (no systemd in a chroot).
grep -q '^ddpcheck:x:[0-9]*:[0-9]*:.*:/var/lib/ddpcheck:/usr/sbin/nologin$' "$root/etc/passwd" ||
    fail "postinst did not create the ddpcheck user"
grep -qx 'ExecStart=/usr/bin/ddpcheckd' "$root/usr/lib/systemd/system/ddpcheckd.service" ||
    fail "the packaged unit does not start /usr/bin/ddpcheckd"
[ -L "$root/etc/systemd/system/multi-user.target.wants/ddpcheckd.service" ] ||
    fail "postinst did not enable ddpcheckd.service"

step "purging"
in_root dpkg --purge ddpcheck
for f in usr/bin/ddpcheck usr/bin/ddpcheckd usr/lib/systemd/system/ddpcheckd.service \
    usr/lib/sysusers.d/ddpcheck.conf usr/lib/tmpfiles.d/ddpcheck.conf etc/ddpcheck \
    etc/systemd/system/multi-user.target.wants/ddpcheckd.service; do
    if [ -e "$root/$f" ] || [ -L "$root/$f" ]; then fail "/$f is still there after dpkg --purge"; fi
done
in_root dpkg-query -W ddpcheck 2>/dev/null && fail "dpkg still knows ddpcheck after --purge"

step "building the container image"
image=$(packaging/build-image.sh --deb "$deb" | tail -n 1)
buildah images "$image"
ctr=$(buildah from "$image")
# The check's image goes too: vfs keeps a full copy of every image (400 MB here).
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true; buildah rmi "$image" >/dev/null 2>&1 || true; rm -rf "$root"' EXIT
out=$(buildah run "$ctr" -- ddpcheck --version)
echo "in the image: $out"
[ "$out" = "ddpcheck ${version%-*}" ] || fail "ddpcheck --version in the image said: $out"
buildah run "$ctr" -- sh -c 'ldconfig -p | grep -q "libnccl.so.2 "' ||
    fail "the image's loader does not find libnccl.so.2"
[ "$(buildah inspect --format '{{.OCIv1.Config.Entrypoint}}' "$image")" = "[/usr/bin/ddpcheckd]" ] ||
    fail "the image's entrypoint is not /usr/bin/ddpcheckd"
step "done: $deb, image $image"
