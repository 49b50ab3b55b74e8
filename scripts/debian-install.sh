#!/usr/bin/env bash
# Installs Debian packages for a script that found something missing: `apt-get update`, then
# `apt-get install` without recommends, each bounded in time. Only root may install; anyone
# else is told which packages to install, and it fails.
#
#   scripts/debian-install.sh WHO WHAT PACKAGE...
#
# WHO starts each message (the calling script's name); WHAT names what is missing.
set -euo pipefail

INSTALL_TIMEOUT=900  # seconds for apt-get update, and again for apt-get install

[ $# -ge 3 ] || { echo "usage: scripts/debian-install.sh WHO WHAT PACKAGE..." >&2; exit 2; }
who=$1
what=$2
shift 2
packages="$*"

say() { echo "$who: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "$what is missing: install Debian's packages $packages \
(apt-get install $packages), or run this as root to have them installed"
say "$what is missing; installing Debian's packages $packages"
started=$SECONDS
DEBIAN_FRONTEND=noninteractive timeout "$INSTALL_TIMEOUT" apt-get update -q >&2 \
    || die "apt-get update failed (or took over ${INSTALL_TIMEOUT}s)"
DEBIAN_FRONTEND=noninteractive timeout "$INSTALL_TIMEOUT" \
    apt-get install -y -q --no-install-recommends "$@" >&2 \
    || die "apt-get install $packages failed (or took over ${INSTALL_TIMEOUT}s)"
say "installed $packages in $((SECONDS - started))s"
