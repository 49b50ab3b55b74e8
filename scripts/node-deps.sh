#!/usr/bin/env bash
# The npm packages the tests use, each set pinned in its package-lock.json: the identity
# provider of the authentication tests (tests/oidc/: oidc-provider) and the OpenAPI tools
# (tests/openapi/: Redocly, Spectral, openapi-typescript). Installs Node.js and npm from
# Debian's packages when they are missing (as root), then each set with `npm ci`, unless its
# node_modules already matches its lock file.
#
#   scripts/node-deps.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
INSTALL_TIMEOUT=900  # seconds for npm ci
NODE_MAJOR_MIN=18    # oidc-provider 8 and jose 5 need Node.js 18 or later

say() { echo "node-deps: $*" >&2; }
die() { say "$*"; exit 1; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    "$root/scripts/debian-install.sh" node-deps "node or npm" nodejs npm
fi

major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge "$NODE_MAJOR_MIN" ] || die "node $(node --version) is too old: \
the tests' packages need Node.js $NODE_MAJOR_MIN or later"

# npm ci writes node_modules/.package-lock.json; the same lock means nothing to do.
for dir in "$root/tests/oidc" "$root/tests/openapi"; do
    installed="$dir/node_modules/.package-lock.json"
    if [ -f "$installed" ] && [ "$installed" -nt "$dir/package-lock.json" ]; then
        continue
    fi
    say "installing the pinned packages (npm ci in ${dir#"$root"/})"
    timeout "$INSTALL_TIMEOUT" npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2 \
        || die "npm ci in ${dir#"$root"/} failed (or took over ${INSTALL_TIMEOUT}s)"
done
