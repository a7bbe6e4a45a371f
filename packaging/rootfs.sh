#!/usr/bin/env bash
# Makes the Debian base of the container image (and of the throwaway root packaging/check.sh
# installs the .deb into) from Debian's archive with mmdebstrap, no registry image needed:
# bookworm minbase plus systemd-standalone-sysusers (the package's postinst creates the user
# with systemd-sysusers), without manual pages, translations and documentation other than the
# copyright files. The sources are mmdebstrap's default Debian mirror, with bookworm-updates and
# bookworm-security added as for any stable suite; DDPCHECK_DEBIAN_MIRROR (a mirror URI, or a
# "deb ..." line) names another.
#
#   packaging/rootfs.sh [--refresh]     prints the tarball's path
#
# The tarball is cached in target/image/ under a name that hashes these settings; --refresh
# makes it again (for the archive's newer security updates).
set -euo pipefail
cd "$(dirname "$0")/.."

suite=bookworm
args=(
    --variant=minbase
    --format=tar
    --include=systemd-standalone-sysusers
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
)
mirror=()
if [ -n "${DDPCHECK_DEBIAN_MIRROR:-}" ]; then
    mirror=("$DDPCHECK_DEBIAN_MIRROR")
fi
key=$(printf '%s\n' "$suite" "${args[@]}" "${mirror[@]}" | sha256sum | cut -c1-12)
out=target/image/rootfs-$suite-$key.tar
if [ "${1:-}" = "--refresh" ] || [ ! -s "$out" ]; then
    command -v mmdebstrap >/dev/null || {
        echo "rootfs: needs mmdebstrap (apt-get install mmdebstrap)" >&2
        exit 2
    }
    mkdir -p target/image
    mmdebstrap --quiet "${args[@]}" "$suite" "$out.part" "${mirror[@]}" >&2
    mv "$out.part" "$out"
fi
echo "$out"
