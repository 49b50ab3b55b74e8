#!/usr/bin/env python3
"""Runs the walk-throughs of README.md and docs/ as written, and compares their output.

    scripts/docs-test.py [--show] [PAGE ...]      (make docs-test builds the binary first)

The pages in POSTGRES_PAGES need a PostgreSQL cluster: TENANTD_TEST_POSTGRES_URL (the role
tenantd's URL) and TENANTD_TEST_POSTGRES_ADMIN_URL (a superuser's), as
scripts/with-postgres.sh exports them (make docs-test-postgres runs them so, inside make
test). Each run of such a page gets a fresh database that the role owns, its URL in the
page's DATABASE_URL, dropped at the end. Without the two variables those pages are left out
of the default list with a message, and named on the command line they are a usage error.

Each page runs in a fresh temporary directory of its own, with a fresh database, against a
server started as `make run` starts it (an admin token in ./admin.token, the database in
./tenantd.db). The page's fenced blocks are taken in order:

- ```sh: sent to one `bash` for the whole page, so variables carry from block to block. A
  block fails when its last command exits non-zero or it runs longer than BLOCK_SECONDS.
- ```sh server: the server is stopped and this command started in its place, in the
  background; the next block runs once /readyz answers 200.
- ```sh quiet: run, and must print nothing (a check that prints only what is wrong).
- ```sh no-run: not run (a production set-up, a command that needs a VM or a network).
- ```<language> file=NAME: written to NAME in the page's directory, for the blocks after it.
- ```json, ```text or ``` after a ```sh block (and before the next one): the output that
  block must give, matched as docs/testing.md says ("The docs run as written"): white space
  is free, `…` and `[..]` stand for any text, times, request ids, tokens, secrets and
  signatures match any of their kind, and an id (`ten_…`, `bud_…`, …) or a SHA-256 in hex
  matches any of its kind the first time it is seen on the page and the same one every time
  after.
  Other output blocks (after prose, with no command before them) are illustrations.

127.0.0.1:8080 (the server), :8081 and :8082 (a second and a third) and :9000 (the webhook
receiver) are replaced by free ports in what runs, and back in what is compared, so runs never
clash over ports.
`--show` prints every block's output (to regenerate a page's outputs from a real run).
Exit status: 0 when every page gives its outputs, 1 when one does not, 2 on a usage error.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "tenantd"

# The pages that run, in order.
PAGES = [
    "README.md",
    "docs/api.md",
    "docs/periods.md",
    "docs/hierarchy.md",
    "docs/ratelimits.md",
    "docs/batches.md",
    "docs/webhooks.md",
    "docs/audit.md",
    "docs/operations.md",
    "docs/authentication.md",
]

# The pages that run beside a PostgreSQL cluster (see the module's doc).
POSTGRES_PAGES = ["docs/postgres.md"]
POSTGRES_URL = "TENANTD_TEST_POSTGRES_URL"
POSTGRES_ADMIN_URL = "TENANTD_TEST_POSTGRES_ADMIN_URL"
# The database a PostgreSQL page runs on, made afresh for it and dropped after it.
DATABASE = f"tenantd_docs_{os.getpid()}"
# How long one psql statement (CREATE or DROP DATABASE) may take.
PSQL_SECONDS = 60

# The pages that run beside the OpenID provider of tests/oidc/ (scripts/node-deps.sh installs
# it): its issuer in OIDC_ISSUER, and a client registered for the page (the client-credentials
# grant, the admin scope) in OIDC_CLIENT_ID and OIDC_CLIENT_SECRET.
OIDC_PAGES = ["docs/authentication.md"]
# How long the provider may take to listen.
PROVIDER_SECONDS = 30

# The pages that do not run, and why (docs/testing.md says the same).
EXEMPT = {
    "docs/console.md": "the console is used in a browser; make console-test walks it",
    "docs/architecture.md": "it has no walk-through",
    "docs/decisions.md": "it has no walk-through",
    "docs/testing.md": "it has no walk-through",
}

# How long one block may run before the page fails.
BLOCK_SECONDS = 60
# How long a server may take to answer /readyz after it starts.
READY_SECONDS = 15
# The ports the pages are written for, and what each stands for.
PORTS = {"8080": "server", "8081": "second server", "8082": "third server", "9000": "receiver"}

FENCE = re.compile(r"^(```+)\s*(.*)$")
ID = re.compile(r"\b(?:(?:ten|bud|res|ent|per|evt|whe|whd)_[0-9A-Z]{26}|[0-9a-f]{64})\b")
# Everything else that differs from run to run, each matched by any text of its kind.
ANY = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z"), r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3})?Z"),
    (re.compile(r"\breq_[0-9a-f]{24}\b"), r"req_[0-9a-f]{24}"),
    (re.compile(r"\btkn_[0-9A-Z…]+_[0-9a-f…]+"), r"tkn_[0-9A-Z]{26}_[0-9a-f]{64}"),
    (re.compile(r"whsec_[A-Za-z0-9+/]{43}="), r"whsec_[A-Za-z0-9+/]{43}="),
    (re.compile(r"v1,[A-Za-z0-9+/]{43}="), r"v1,[A-Za-z0-9+/]{43}="),
]
WILDCARD = re.compile(r"…|\[\.\.\]")
SPACE = re.compile(r"\s+")


@dataclass
class Block:
    """One fenced block of a page: its language, its marks, its first line and its text."""

    lang: str
    marks: list[str]
    line: int
    text: str
    expected: "Block | None" = None


@dataclass
class Page:
    """A page's state while it runs: its directory, its server, its shell and its ids."""

    path: str
    dir: Path
    ports: dict[str, int]
    ids: dict[str, str] = field(default_factory=dict)
    server: subprocess.Popen | None = None
    database_url: str | None = None
    # Variables the page's commands and servers get beside the usual ones.
    env: dict[str, str] = field(default_factory=dict)
    provider: subprocess.Popen | None = None
    shell: subprocess.Popen | None = None
    lines: "queue.Queue[str | None]" = field(default_factory=queue.Queue)


def blocks(path: Path) -> list[Block]:
    """The page's fenced blocks, each expected output tied to the command before it."""
    found: list[Block] = []
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        words = m.group(2).split()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != m.group(1):
            body.append(lines[i])
            i += 1
        i += 1
        found.append(Block(words[0] if words else "", words[1:], start, "\n".join(body)))
    out: list[Block] = []
    last_run: Block | None = None
    for b in found:
        if b.lang == "sh" and not {"no-run", "server"} & set(b.marks):
            last_run = b
        elif b.lang == "sh":
            last_run = None
        elif b.lang in ("json", "text", "") and last_run is not None and last_run.expected is None:
            last_run.expected = b
            continue
        out.append(b)
    return out


def free_port() -> int:
    """A port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_run(page: Page, text: str) -> str:
    """The text with the page's ports replaced by this run's."""
    for port, name in PORTS.items():
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{page.ports[name]}")
        text = text.replace(f'"127.0.0.1", {port})', f'"127.0.0.1", {page.ports[name]})')
    return text


def as_written(page: Page, text: str) -> str:
    """The output with this run's ports written as the page writes them."""
    for port, name in PORTS.items():
        text = text.replace(f"127.0.0.1:{page.ports[name]}", f"127.0.0.1:{port}")
    return text


def pattern(page: Page, expected: str) -> tuple[re.Pattern[str], dict[str, str]]:
    """A regular expression for the expected text, and the ids it names first (by group)."""
    out, groups, seen = [], {}, {}
    pos = 0
    text = expected.strip()
    token = re.compile(
        "|".join(
            [f"(?P<a{n}>{p.pattern})" for n, (p, _) in enumerate(ANY)]
            + [f"(?P<w>{WILDCARD.pattern})", f"(?P<s>{SPACE.pattern})", f"(?P<i>{ID.pattern})"]
        )
    )
    for m in token.finditer(text):
        out.append(re.escape(text[pos : m.start()]))
        pos = m.end()
        kind = m.lastgroup
        if kind == "w":
            out.append(r".*?")
        elif kind == "s":
            out.append(r"\s*")
        elif kind == "i":
            written = m.group(0)
            if written in page.ids:
                out.append(re.escape(page.ids[written]))
            elif written in seen:
                out.append(f"(?P={seen[written]})")
            else:
                name = f"id{len(seen)}"
                seen[written] = name
                groups[name] = written
                kind_rx = "[0-9a-f]{64}" if len(written) == 64 else written[:4] + "[0-9A-Z]{26}"
                out.append(f"(?P<{name}>{kind_rx})")
        else:
            out.append(ANY[int((kind or "a0")[1:])][1])
    out.append(re.escape(text[pos:]))
    return re.compile("".join(out), re.DOTALL), groups


def matches(page: Page, expected: str, actual: str) -> bool:
    """Whether the actual output is the expected one; binds the ids it names first."""
    rx, groups = pattern(page, expected)
    m = rx.fullmatch(actual.strip())
    if not m:
        return False
    for name, written in groups.items():
        page.ids[written] = m.group(name)
    return True


def ready(port: int) -> bool:
    """Whether the server on the port answers /readyz with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def start_server(page: Page, command: str) -> None:
    """Stops the page's server, if one runs, and starts `command` in its place."""
    stop_server(page)
    log = open(page.dir / "server.log", "ab")
    page.server = subprocess.Popen(
        # `env` lets the command begin with variables (TENANTD_DB=… tenantd serve).
        ["bash", "-c", "exec env " + command],
        cwd=page.dir,
        env=environment(page),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if page.server.poll() is not None:
            raise Failure(f"the server exited {page.server.returncode}; its log:\n" + server_log(page))
        if ready(page.ports["server"]):
            return
        time.sleep(0.05)
    raise Failure(f"the server did not answer /readyz within {READY_SECONDS} s; its log:\n" + server_log(page))


def stop_server(page: Page) -> None:
    """SIGTERM to the page's server, as Ctrl-C to `make run`; waits for it to exit."""
    if page.server is None:
        return
    try:
        os.killpg(page.server.pid, signal.SIGTERM)
        page.server.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(page.server.pid, signal.SIGKILL)
        page.server.wait()
    page.server = None


def server_log(page: Page) -> str:
    """The last lines the server logged."""
    path = page.dir / "server.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-20:]) if path.exists() else ""


def environment(page: Page) -> dict[str, str]:
    """What the page's commands run with: the webhook tests' Python first on the PATH (it has
    `standardwebhooks`), the docs' npm packages on NODE_PATH, and no TENANTD_ variable of the
    caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTD_")}
    venv = ROOT / ".venv-webhooks" / "bin"
    env["PATH"] = f"{venv}:{env.get('PATH', '/usr/bin:/bin')}"
    env["NODE_PATH"] = str(ROOT / "tests" / "docs" / "node_modules")
    env["TENANTD_LISTEN"] = f"127.0.0.1:{page.ports['server']}"
    if page.database_url is not None:
        env["DATABASE_URL"] = page.database_url
    env.update(page.env)
    env["RUST_LOG"] = "warn"
    return env


class Failure(Exception):
    """A block that did not give what its page says."""


def run_block(page: Page, block: Block) -> tuple[str, int]:
    """Sends the block to the page's shell; its output and its last command's exit status."""
    assert page.shell is not None and page.shell.stdin is not None
    mark = f"__docs_test_{block.line}__"
    page.shell.stdin.write(to_run(page, block.text) + f"\nprintf '\\n{mark} %s\\n' \"$?\"\n")
    page.shell.stdin.flush()
    out: list[str] = []
    deadline = time.monotonic() + BLOCK_SECONDS
    while True:
        try:
            line = page.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise Failure(f"no end within {BLOCK_SECONDS} s; output so far:\n" + "".join(out))
        if line is None:
            raise Failure("the shell exited; output so far:\n" + "".join(out))
        if line.startswith(mark):
            status = int(line.split()[1])
            return as_written(page, "".join(out)), status
        out.append(line)


def start_shell(page: Page) -> None:
    """One bash for the whole page, its output read line by line by a thread."""
    page.shell = subprocess.Popen(
        ["bash", "--noprofile", "--norc"],
        cwd=page.dir,
        env=environment(page),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
    )

    def pump() -> None:
        assert page.shell is not None and page.shell.stdout is not None
        for line in page.shell.stdout:
            page.lines.put(line)
        page.lines.put(None)

    threading.Thread(target=pump, daemon=True).start()


def stop_shell(page: Page) -> None:
    """Ends the page's shell and everything it started (a receiver in the background)."""
    if page.shell is None:
        return
    try:
        os.killpg(page.shell.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        page.shell.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(page.shell.pid, signal.SIGKILL)
        page.shell.wait()


def psql(url: str, sql: str) -> None:
    """Runs one statement with psql on `url`; the URL is never printed."""
    done = subprocess.run(
        ["psql", url, "-XqAt", "-v", "ON_ERROR_STOP=1", "-c", sql],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PSQL_SECONDS,
    )
    if done.returncode != 0:
        raise Failure(f"psql {sql!r} failed: {done.stderr.strip()}")


def database(name: str) -> str:
    """A fresh database of that name on the cluster, owned by tenantd's role: its URL."""
    url, admin = os.environ[POSTGRES_URL], os.environ[POSTGRES_ADMIN_URL]
    base, _, query = url.partition("?")
    authority = base.index("://") + 3
    slash = base.index("/", authority)
    psql(admin, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(admin, f"CREATE DATABASE {name} OWNER tenantd")
    return base[:slash] + "/" + name + ("?" + query if query else "")


def start_provider(page: Page) -> None:
    """Starts the test provider on a free port and registers a client for the page."""
    port = free_port()
    page.provider = subprocess.Popen(
        ["node", "provider.mjs", "--port", str(port)],
        cwd=ROOT / "tests" / "oidc",
        stdin=subprocess.PIPE,  # it stops when this closes
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    issuer = f"http://127.0.0.1:{port}"
    lines: "queue.Queue[str | None]" = queue.Queue()

    def pump() -> None:
        assert page.provider is not None and page.provider.stdout is not None
        for line in page.provider.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + PROVIDER_SECONDS
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise Failure(f"the identity provider did not listen within {PROVIDER_SECONDS} s")
        if line is None:
            raise Failure("the identity provider exited (scripts/node-deps.sh installs it)")
        if line.strip() == f"listening on {issuer}":
            break
    body = b'{"scope": "tenantd:admin", "tenantd_permissions": []}'
    request = urllib.request.Request(
        issuer + "/reg", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        client = json.load(r)
    page.env.update(
        OIDC_ISSUER=issuer,
        OIDC_CLIENT_ID=client["client_id"],
        OIDC_CLIENT_SECRET=client["client_secret"],
    )


def stop_provider(page: Page) -> None:
    """Closes the provider's stdin, which ends it; SIGKILL if it lingers."""
    if page.provider is None:
        return
    try:
        if page.provider.stdin is not None:
            page.provider.stdin.close()
        page.provider.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(page.provider.pid, signal.SIGKILL)
        page.provider.wait()


def has_postgres() -> bool:
    """Whether the cluster's two URLs are given."""
    return bool(os.environ.get(POSTGRES_URL) and os.environ.get(POSTGRES_ADMIN_URL))


def run_page(rel: str, show: bool) -> list[str]:
    """Runs one page; a list of its failures, each saying where, what was expected, what came."""
    failures: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="tenantd-docs-"))
    page = Page(rel, tmp, {name: free_port() for name in PORTS.values()})
    try:
        (tmp / "target").symlink_to(ROOT / "target")
        if rel in POSTGRES_PAGES:
            page.database_url = database(DATABASE)
        if rel in OIDC_PAGES:
            start_provider(page)
        token = tmp / "admin.token"
        token.write_text(os.urandom(32).hex())
        token.chmod(0o600)
        start_server(
            page,
            f"target/release/tenantd serve --listen 127.0.0.1:{page.ports['server']} "
            "--db ./tenantd.db --admin-token-file ./admin.token",
        )
        start_shell(page)
        for block in blocks(ROOT / rel):
            where = f"{rel}:{block.line}"
            name = next((m[5:] for m in block.marks if m.startswith("file=")), None)
            if name is not None:
                (tmp / name).write_text(to_run(page, block.text) + "\n")
                continue
            if block.lang != "sh" or "no-run" in block.marks:
                continue
            if "server" in block.marks:
                start_server(page, to_run(page, block.text.strip()))
                continue
            output, status = run_block(page, block)
            if show:
                print(f"--- {where}\n{output.rstrip()}\n")
            if status != 0:
                failures.append(f"{where}: the block's last command exited {status}; its output:\n{output}")
                break
            if "quiet" in block.marks and output.strip():
                failures.append(f"{where}: the block prints nothing on the page, but printed:\n{output}")
                break
            if block.expected is not None and not matches(page, block.expected.text, output):
                failures.append(
                    f"{where}: the output differs from the one shown at {rel}:{block.expected.line}\n"
                    f"--- expected\n{block.expected.text.strip()}\n--- actual\n{output.strip()}"
                )
                break
    except Failure as e:
        failures.append(f"{rel}: {e}")
    finally:
        stop_shell(page)
        stop_server(page)
        stop_provider(page)
        if page.database_url is not None:
            try:
                psql(os.environ[POSTGRES_ADMIN_URL], f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            except (Failure, subprocess.TimeoutExpired) as e:
                failures.append(f"{rel}: its database was not dropped: {e}")
        if failures and os.environ.get("DOCS_TEST_KEEP"):
            print(f"docs-test: {rel} kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return failures


def main(argv: list[str]) -> int:
    show = "--show" in argv
    named = [a for a in argv if a != "--show"]
    pages = named or PAGES + (POSTGRES_PAGES if has_postgres() else [])
    if not BIN.exists():
        print(f"docs-test: {BIN} is missing: run make build (make docs-test does)", file=sys.stderr)
        return 2
    for rel in pages:
        if not (ROOT / rel).exists():
            print(f"docs-test: no page {rel}", file=sys.stderr)
            return 2
        if rel in POSTGRES_PAGES and not has_postgres():
            print(
                f"docs-test: {rel} needs PostgreSQL: {POSTGRES_URL} and {POSTGRES_ADMIN_URL} "
                "(run it as make docs-test-postgres does, through scripts/with-postgres.sh)",
                file=sys.stderr,
            )
            return 2
    failed = 0
    started = time.monotonic()
    for rel in pages:
        t = time.monotonic()
        failures = run_page(rel, show)
        print(f"docs-test: {rel}: {'FAILED' if failures else 'ok'} ({time.monotonic() - t:.1f} s)")
        for f in failures:
            print(f, file=sys.stderr)
        failed += bool(failures)
    if not named:
        if not has_postgres():
            for rel in POSTGRES_PAGES:
                print(f"docs-test: {rel}: not run here: it needs PostgreSQL (make docs-test-postgres)")
        for rel, why in EXEMPT.items():
            print(f"docs-test: {rel}: not run: {why}")
    print(f"docs-test: {len(pages) - failed} of {len(pages)} pages as written ({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
