#!/usr/bin/env bash
# Builds the Debian package `ddpcheck` with cargo-deb from one build of both binaries: the release
# build, which is what ships.
#
#   packaging/build-deb.sh [--no-build] [--profile PROFILE]
#
# Without --no-build it runs `cargo build --release --locked` for ddpcheck and ddpcheckd first
# (cargo-deb itself would build only the CLI's crate). --profile packages another Cargo profile's
# binaries instead (cargo-deb strips them): CI packages its test build's (`--profile dev`), to
# check the package without a second build of the workspace. It stages what cli/Cargo.toml's
# [package.metadata.deb] names under target/deb-staging/: the unit with ExecStart in /usr/bin
# (the repository's unit is for binaries installed in /usr/local/bin), the sysusers and tmpfiles
# files under the names cargo-deb looks for (ddpcheck.sysusers, ddpcheck.tmpfile), and a Debian
# changelog entry for this version. The last line printed is the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."

build=yes
profile=release
while [ $# -gt 0 ]; do
    case $1 in
        --no-build) build=no ;;
        --profile)
            [ $# -ge 2 ] || { echo "build-deb: --profile needs a Cargo profile (release, dev)" >&2; exit 64; }
            profile=$2
            shift
            ;;
        *) echo "build-deb: unknown argument $1 (usage: build-deb.sh [--no-build] [--profile PROFILE])" >&2; exit 64 ;;
    esac
    shift
done

# cargo-deb's version is pinned; .ci/install-services installs this one.
CARGO_DEB_VERSION=3.8.0
if [ "$(cargo deb --version 2>/dev/null | awk '{print $NF}')" != "$CARGO_DEB_VERSION" ]; then
    echo "build-deb: needs cargo-deb $CARGO_DEB_VERSION: cargo install cargo-deb --version $CARGO_DEB_VERSION --locked" >&2
    exit 2
fi

if [ "$build" = yes ]; then
    cargo build --profile "$profile" --locked --bin ddpcheck --bin ddpcheckd
fi

stage=target/deb-staging
rm -rf "$stage"
mkdir -p "$stage"
# The one line that differs from systemd/ddpcheckd.service; exactly one must be replaced.
sed 's#^ExecStart=/usr/local/bin/ddpcheckd$#ExecStart=/usr/bin/ddpcheckd#' \
    systemd/ddpcheckd.service >"$stage/ddpcheckd.service"
if [ "$(grep -c '^ExecStart=/usr/bin/ddpcheckd$' "$stage/ddpcheckd.service")" != 1 ]; then
    echo "build-deb: systemd/ddpcheckd.service must have ExecStart=/usr/local/bin/ddpcheckd" >&2
    exit 1
fi
cp systemd/ddpcheck.sysusers.conf "$stage/ddpcheck.sysusers"
cp systemd/ddpcheck.tmpfiles.conf "$stage/ddpcheck.tmpfile"

version=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "ddpcheck"))')
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' cli/Cargo.toml)
# The date of the commit built (reproducible); the current time outside a git checkout.
date=$(git log -1 --format=%cD 2>/dev/null || date -R)
cat >"$stage/changelog" <<CHANGELOG
ddpcheck ($version-1) unstable; urgency=medium

  * ddpcheck $version, built by packaging/build-deb.sh from the repository.

 -- $maintainer  $date
CHANGELOG

cargo deb -p ddpcheck --no-build --locked --profile "$profile" --output target/debian/ >&2
deb="target/debian/ddpcheck_${version}-1_$(dpkg --print-architecture).deb"
test -f "$deb"
echo "$deb"
