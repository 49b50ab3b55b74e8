#!/usr/bin/env bash
# The Python package the webhook tests check signatures with: the Standard Webhooks
# reference library (`standardwebhooks`), pinned with its hash in
# tests/webhooks/requirements.txt, in a virtual environment of its own (.venv-webhooks in the
# repository's root). tests/api/webhooks.rs runs tests/webhooks/verify.py with that
# environment's interpreter, so tenantd's signatures are checked by code that is not its own;
# those tests fail, saying to run this script, when the environment is missing.
# Does nothing when every pinned version is already installed there. Makes the environment
# with `python3 -m venv` (installing Debian's python3-venv first, as root, when the venv module
# cannot).
#
#   scripts/webhook-deps.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-webhooks"
requirements="$root/tests/webhooks/requirements.txt"
INSTALL_TIMEOUT=900  # seconds for pip install

say() { echo "webhook-deps: $*" >&2; }
die() { say "$*"; exit 1; }

command -v python3 >/dev/null 2>&1 || die "python3 is missing: install Debian's package python3"

# Exit 0 when every `name==version` line of the requirements is what the environment has.
installed() {
    [ -x "$venv/bin/python" ] || return 1
    "$venv/bin/python" - "$requirements" <<'PY' 2>/dev/null
import re, sys
from importlib.metadata import PackageNotFoundError, version
for line in open(sys.argv[1]):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s;\\]+)", line)
    if not m:
        continue
    try:
        if version(m.group(1)) != m.group(2):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
}

if installed; then
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        rm -rf "$venv"
        "$root/scripts/debian-install.sh" webhook-deps "python3 -m venv" python3-venv
        python3 -m venv "$venv" || die "python3 -m venv $venv failed"
    fi
    # Keeps the environment out of `git status`, as Python 3.13's venv does by itself.
    echo '*' > "$venv/.gitignore"
fi

say "installing the pinned packages of ${requirements#"$root"/} in ${venv#"$root"/}"
started=$SECONDS
timeout "$INSTALL_TIMEOUT" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-input --require-hashes --only-binary :all: -r "$requirements" >&2 \
    || die "pip install -r ${requirements#"$root"/} failed (or took over ${INSTALL_TIMEOUT}s)"
installed || die "the environment does not have the pinned versions after pip install"
say "installed in $((SECONDS - started))s"
