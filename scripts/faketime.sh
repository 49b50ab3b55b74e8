#!/usr/bin/env bash
# libfaketime, which the benchmark's boundary row (benches/load/boundary.rs) preloads into
# the server to move its clock: installs Debian's package faketime when the library is
# missing (as root), and prints the library's path.
#
#   scripts/faketime.sh
set -euo pipefail

INSTALL_TIMEOUT=900  # seconds for apt-get update and apt-get install
LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

say() { echo "faketime: $*" >&2; }
die() { say "$*"; exit 1; }

if [ ! -f "$LIB" ]; then
    [ "$(id -u)" = 0 ] || die "$LIB is missing: install Debian's package faketime \
(apt-get install faketime), or run this as root to have it installed"
    say "$LIB missing; installing Debian's package faketime"
    started=$SECONDS
    DEBIAN_FRONTEND=noninteractive timeout "$INSTALL_TIMEOUT" apt-get update -q >&2 \
        || die "apt-get update failed (or took over ${INSTALL_TIMEOUT}s)"
    DEBIAN_FRONTEND=noninteractive timeout "$INSTALL_TIMEOUT" \
        apt-get install -y -q --no-install-recommends faketime >&2 \
        || die "apt-get install faketime failed (or took over ${INSTALL_TIMEOUT}s)"
    [ -f "$LIB" ] || die "the package faketime did not bring $LIB"
    say "installed faketime in $((SECONDS - started))s"
fi
echo "$LIB"
