#!/usr/bin/env bash
# libfaketime, which the benchmark's boundary row (benches/load/boundary.rs) preloads into
# the server to move its clock: installs Debian's package faketime when the library is
# missing (as root), and prints the library's path.
#
#   scripts/faketime.sh
set -euo pipefail

LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

say() { echo "faketime: $*" >&2; }
die() { say "$*"; exit 1; }

if [ ! -f "$LIB" ]; then
    "$(dirname "$0")/debian-install.sh" faketime "$LIB" faketime
    [ -f "$LIB" ] || die "the package faketime did not bring $LIB"
fi
echo "$LIB"
