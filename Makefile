# tenantd: `make run` starts a demo; `make test` runs every check.

CARGO      ?= cargo
LISTEN     ?= 127.0.0.1:8080
DB         ?= ./tenantd.db
TOKEN_FILE ?= ./admin.token
BIN        := target/release/tenantd
PG_DIR     ?= target/postgres/primary
BACKEND    ?= sqlite
PG_DELAY_MS ?= 0
SCALE_CONNECTIONS ?= 128
STATIC_TARGET := x86_64-unknown-linux-gnu

.PHONY: run build test test-builds test-with-postgres check console-test docs-test docs-test-postgres bench bench-with-postgres bench-ab crash-test static clean help fuzz \
	api-fuzz openapi-check postgres-up postgres-down

help:
	@echo "make run     build the release binary and serve a demo on $(LISTEN)"
	@echo "make test    formatting, lints and every test (what CI runs)"
	@echo "make check   the quick loop: formatting, lints and cargo test (no root needed)"
	@echo "make console-test  the web console in headless Chromium (part of make test)"
	@echo "make docs-test  the walk-throughs of README.md and docs/ run as written (part of make test)"
	@echo "                (docs/postgres.md beside PostgreSQL: make docs-test-postgres, inside make test)"
	@echo "make crash-test  kill -9 cycles under load (CRASH_CYCLES=200)"
	@echo "make bench   the load benchmark (BENCH_ARGS=--quick for a short run)"
	@echo "make bench BACKEND=postgres  the benchmark on PostgreSQL (1 and 3 instances, 3 routed by tenant), then on SQLite"
	@echo "            PG_DELAY_MS=1  with PostgreSQL 1 ms away each way (a delaying proxy in the benchmark)"
	@echo "            SCALE_CONNECTIONS=128  the connections of its scale-out rows (1 and 3 instances)"
	@echo "make bench-ab  the benchmark against BASE=<git revision> in alternating runs (ROUNDS=3)"
	@echo "make fuzz    coverage-guided fuzzing of the request parsing (FUZZ_SECONDS=300)"
	@echo "make api-fuzz  Schemathesis against the served OpenAPI document (API_FUZZ_EXAMPLES=500)"
	@echo "make openapi-check  openapi.json through Redocly's recommended rules and Spectral's spectral:oas"
	@echo "make static  a statically linked binary in target/$(STATIC_TARGET)/release/"
	@echo "make postgres-up  a private PostgreSQL for the tests in $(PG_DIR) (make postgres-down stops it)"

build:
	$(CARGO) build --release --locked

# Generates a 64-character admin token (mode 0600) on first use, then serves in the foreground.
run: build
	@if [ ! -s "$(TOKEN_FILE)" ]; then \
		(umask 077 && head -c 32 /dev/urandom | od -An -vtx1 | tr -d ' \n' > "$(TOKEN_FILE)"); \
		echo "generated a new admin token in $(TOKEN_FILE)"; \
	fi
	@echo "admin token file: $(TOKEN_FILE)"
	@echo "database:         $(DB)"
	@echo "web console:      http://$(LISTEN)/console/  (sign in with the token in $(TOKEN_FILE))"
	@echo "try, from another terminal in this directory:"
	@echo "  curl -s -X POST http://$(LISTEN)/v1/tenants \\"
	@echo "    -H \"Authorization: Bearer \$$(cat $(TOKEN_FILE))\" \\"
	@echo "    -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"name\":\"acme-prod\",\"opening_deposit_atomic\":\"1000\"}'"
	@echo "stop with Ctrl-C"
	@exec $(BIN) serve --listen "$(LISTEN)" --db "$(DB)" --admin-token-file "$(TOKEN_FILE)"

# What the steps need beside Rust (Debian, npm and Python packages) is installed by
# scripts/test-deps.sh in the background while clippy compiles, and waited for after it
# (scripts/background.sh; at most 30 minutes, every install in it is bounded).
# The authentication tests need a real identity provider: scripts/node-deps.sh installs
# Node.js (when missing) and the pinned packages of tests/oidc/ and tests/openapi/; the
# webhook tests check signatures with the third-party `standardwebhooks` Python package,
# which scripts/webhook-deps.sh installs into .venv-webhooks;
# scripts/openapi-check.sh lints openapi.json with the latter and drives generated clients.
# The steps after the lints run beside a private PostgreSQL cluster in PG_DIR, started
# afresh and stopped at the end, also when a step fails: scripts/with-postgres.sh exports
# TENANTD_TEST_POSTGRES_URL and TENANTD_TEST_POSTGRES_ADMIN_URL to them.
test:
	$(CARGO) fmt --all -- --check
	scripts/background.sh start target/test-deps scripts/test-deps.sh
	$(CARGO) clippy --release --locked --all-targets -- -D warnings
	scripts/background.sh wait target/test-deps 1800
	$(CARGO) build --release --locked
	scripts/background.sh start target/test-builds make --no-print-directory test-builds
	TENANTD_BUILT=1 scripts/openapi-check.sh
	scripts/console-test.sh
	scripts/docs-test.py
	scripts/background.sh wait target/test-builds 1800
	PG_DIR=$(PG_DIR) scripts/with-postgres.sh $(MAKE) --no-print-directory test-with-postgres

# What test-with-postgres compiles: make test builds it in the background while the OpenAPI
# tools, the console and the walk-throughs run the release binary (those steps call no cargo,
# whose build lock would make them wait; scripts/test-deps.sh installed what they need).
# It is started as `make`, not `$(MAKE)`: a line that names $(MAKE) runs even under make -n.
test-builds:
	$(CARGO) test --release --locked --lib --bins --no-run
	scripts/api-tests.sh --no-run
	$(CARGO) bench --locked --bench load --no-run

# The web console in Debian's Chromium, headless, driven by Playwright (tests/console/): the
# walk from sign-in to a webhook delivery, the hostile name, CSP and accessibility checks, and
# screenshots in target/console/. scripts/browser-deps.sh installs Chromium and the pinned
# packages.
console-test: build
	scripts/node-deps.sh
	scripts/browser-deps.sh
	scripts/console-test.sh

# The walk-throughs of README.md and docs/ run as written, each page in a fresh directory with
# a fresh database and its own server, and their outputs are compared with the pages'
# (scripts/docs-test.py; docs/testing.md says how, and which pages do not run and why); the
# authentication page against the identity provider of tests/oidc/ (scripts/node-deps.sh). The
# webhook page verifies signatures with the Python and npm `standardwebhooks` packages:
# scripts/webhook-deps.sh installs the first, `npm ci` in tests/docs/ the second.
docs-test: build
	scripts/node-deps.sh
	@command -v jq >/dev/null && command -v sqlite3 >/dev/null || \
		scripts/debian-install.sh docs-test "jq and sqlite3 (the pages use them)" jq sqlite3
	scripts/webhook-deps.sh
	@[ tests/docs/node_modules/.package-lock.json -nt tests/docs/package-lock.json ] || \
		npm ci --prefix tests/docs --no-audit --no-fund --loglevel=error
	scripts/docs-test.py

# The pages that run beside PostgreSQL (docs/postgres.md), each on a fresh database of the
# cluster that scripts/with-postgres.sh starts; make test runs this inside test-with-postgres.
docs-test-postgres: build
	@[ -n "$$TENANTD_TEST_POSTGRES_URL" ] && [ -n "$$TENANTD_TEST_POSTGRES_ADMIN_URL" ] || \
		{ echo "docs-test-postgres: run it through scripts/with-postgres.sh (make test does)"; exit 2; }
	scripts/docs-test.py docs/postgres.md

# The unit and property tests run first. The api suite runs twice (scripts/api-tests.sh, which
# compiles the suite's own code at opt-level 1 and the binary under test as released): on
# SQLite files, then on PostgreSQL, each server on a fresh database of its own
# (TENANTD_TEST_BACKEND=postgres, see tests/api/helpers/pg.rs). Schemathesis runs beside the
# second pass, which spends most of its time waiting on the database. The second pass leaves
# out the tests below, which need the SQLite file itself:
# - backup::  `tenantd backup` is SQLite's (on PostgreSQL it exits 2 and names pg_dump:
#   postgres_copy::backup_on_postgres_names_pg_dump).
# - the file: its mode 0600 (config::the_database_file_is_private), and the revision-1 and
#   revision-2 files of tests/fixtures migrated in place (upgrade::).
# - SQLite's write lock held by the test's own connection: a keyed create answered 503 after
#   the 1 s busy timeout, and /readyz 503 while it is held. On PostgreSQL every instance
#   takes its tenants' rows without waiting, and ready means a server that takes
#   writes (not a standby).
# - a purged token's bytes erased from the file, its free pages and its WAL (secure_delete
#   and a truncating checkpoint, also across kill -9). PostgreSQL keeps dead row versions
#   until VACUUM (schema-postgres.sql says so); that the records are purged is checked on
#   both (idempotency::an_expired_key_creates_anew_and_its_stored_response_is_purged).
# - tampering with copies of the file and its WAL, tables and triggers found through
#   sqlite_master (the reservations:: one); PostgreSQL's edited balance
#   is caught in postgres_copy::audit_verify_on_postgres_catches_an_edited_balance, and the
#   audit:: tamper tests run on both.
SQLITE_ONLY_TESTS := \
	backup:: \
	config::the_database_file_is_private \
	upgrade:: \
	faults::a_locked_database_gives_503_with_retry_after \
	health::readyz_is_503_while_another_process_holds_the_write_lock \
	idempotency::a_purged_token_leaves_the_files_while_serving_and_after_kill_9 \
	idempotency::a_purged_token_leaves_the_wal_after_a_crash_restart \
	idempotency::an_expired_stored_response_leaves_no_plaintext_token_in_the_files \
	reservations::audit_verify_passes_after_a_mixed_workload_and_fails_after_tampering

# Tests that choose their databases themselves, whatever the backend: they ran in the first
# pass.
BACKEND_FREE_TESTS := postgres_copy:: postgres_instances::

test-with-postgres:
	@[ -n "$$TENANTD_TEST_POSTGRES_URL" ] && [ -n "$$TENANTD_TEST_POSTGRES_ADMIN_URL" ] || \
		{ echo "test-with-postgres: run by make test (through scripts/with-postgres.sh)"; exit 2; }
	$(CARGO) test --release --locked --lib --bins
	scripts/api-tests.sh
	scripts/background.sh start target/api-fuzz-run \
		env API_FUZZ_EXAMPLES=100 API_FUZZ_MAX_TIME=60 API_FUZZ_TIMEOUT=600 scripts/api-fuzz.sh
	TENANTD_TEST_BACKEND=postgres scripts/api-tests.sh \
		$(addprefix --skip ,$(SQLITE_ONLY_TESTS) $(BACKEND_FREE_TESTS))
	scripts/background.sh wait target/api-fuzz-run 660
	$(MAKE) --no-print-directory docs-test-postgres
	$(CARGO) bench --locked --bench load -- --smoke
	scripts/postgres-schema-check.sh

# The quick loop while working, for anyone, root or not: formatting, lints and `cargo test`,
# without the browser, the benchmark smoke run and Schemathesis (which install Debian and
# Python packages). The cargo tests run beside a private PostgreSQL cluster, as in
# `make test`, where a PostgreSQL server is installed (or can be: as root); without one, the
# tests that need it are left to `make test`, and it says so. The storage-fault tests mount
# a tmpfs and drop to `nobody`, which needs root: run by another user, `make check` leaves
# them to `make test` too.
ROOT_ONLY_TESTS := faults::a_full_disk faults::a_read_only_database_file faults::a_read_only_file_system
POSTGRES_TESTS := postgres_copy:: postgres_instances:: store::model_tests::the_postgres_store_follows_the_model \
	store::postgres::blocking::tests::
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings
	scripts/node-deps.sh
	scripts/webhook-deps.sh
	@skip=""; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "make check: not root, so the storage-fault tests are left to make test"; \
		skip="$(ROOT_ONLY_TESTS)"; \
	fi; \
	if [ "$$(id -u)" = 0 ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		PG_DIR=$(PG_DIR) scripts/with-postgres.sh $(CARGO) test --release --locked -- \
			$$(for t in $$skip; do printf -- '--skip %s ' "$$t"; done); \
	else \
		echo "make check: no PostgreSQL server here (/usr/lib/postgresql/*/bin/initdb), so the"; \
		echo "  tests that need one are left to make test: $(POSTGRES_TESTS)"; \
		$(CARGO) test --release --locked -- \
			$$(for t in $$skip $(POSTGRES_TESTS); do printf -- '--skip %s ' "$$t"; done); \
	fi

# kill -9 at random instants under creates and tombstones, CRASH_CYCLES times (CI runs 10).
CRASH_CYCLES ?= 200
crash-test:
	CRASH_CYCLES=$(CRASH_CYCLES) scripts/api-tests.sh crash --nocapture

# The full benchmark takes a few minutes; BENCH_ARGS="--quick" runs one in under a minute.
# BACKEND=postgres runs it beside a private PostgreSQL cluster in PG_DIR (started afresh and
# stopped at the end, see scripts/with-postgres.sh), every server on a database of its own
# there: with one tenantd instance, then with three on the one database, then the spending
# rows with three again, each tenant sent to one of them as a balancer that routes by tenant
# would (--route tenant); then the scale-out rows (creates, and the spending rows routed by
# tenant) with one instance and with three on SCALE_CONNECTIONS (128) connections, enough
# that the clients are not the limit (32 clients that each wait for their answer make at
# most 32 ÷ the latency a second, and a network before the database lengthens the latency,
# not the work); then, the cluster stopped, the same BENCH_ARGS on SQLite, so the tables
# come from one run. Several instances on this one machine share its cores: each takes its
# share (--workers, the cores divided among them, at least 1), as docs/postgres.md advises.
# PG_DELAY_MS=1 puts PostgreSQL 1 ms away each way, as a managed database across a network
# is: the benchmark's own delaying proxy (benches/load/delay.rs) carries the instances'
# connections, and the report's first note gives the round trip measured through it
# (pgbench); each group's notes say how long the proxy in fact held what it carried.
# The boundary row moves the server's clock with libfaketime (scripts/faketime.sh installs
# it); it runs on SQLite only, and the PostgreSQL runs say they leave it out.
bench:
	scripts/faketime.sh >/dev/null
ifeq ($(BACKEND),postgres)
	PG_DIR=$(PG_DIR) scripts/with-postgres.sh $(MAKE) --no-print-directory bench-with-postgres
	$(CARGO) bench --locked --bench load -- $(BENCH_ARGS)
else ifeq ($(BACKEND),sqlite)
	$(CARGO) bench --locked --bench load -- $(BENCH_ARGS)
else
	@echo "make bench: BACKEND is sqlite (the default) or postgres, not $(BACKEND)"; exit 2
endif

# The URLs stay in the environment: make prints the variables' names, not the passwords.
PG_BENCH = $(CARGO) bench --locked --bench load -- $(BENCH_ARGS) --pg-delay-ms $(PG_DELAY_MS) \
	--postgres "$$TENANTD_TEST_POSTGRES_ADMIN_URL" --postgres-url "$$TENANTD_TEST_POSTGRES_URL"
# The scale-out rows are left out when BENCH_ARGS picks a group (--only).
SCALE_OUT = $(if $(findstring --only,$(BENCH_ARGS)),,yes)

bench-with-postgres:
	@[ -n "$$TENANTD_TEST_POSTGRES_URL" ] && [ -n "$$TENANTD_TEST_POSTGRES_ADMIN_URL" ] || \
		{ echo "bench-with-postgres: run by make bench BACKEND=postgres"; exit 2; }
	$(PG_BENCH) --instances 1
	$(PG_BENCH) --instances 3
	$(PG_BENCH) --instances 3 $(if $(SCALE_OUT),--only spend) --route tenant
ifneq ($(SCALE_OUT),)
	$(PG_BENCH) --connections $(SCALE_CONNECTIONS) --instances 1 --only create
	$(PG_BENCH) --connections $(SCALE_CONNECTIONS) --instances 3 --only create
	$(PG_BENCH) --connections $(SCALE_CONNECTIONS) --instances 1 --only spend
	$(PG_BENCH) --connections $(SCALE_CONNECTIONS) --instances 3 --only spend --route tenant
endif

# The OpenAPI document through the linters of client generators' users (pinned npm packages
# of tests/openapi/); part of make test.
openapi-check:
	scripts/openapi-check.sh

# The benchmark against another build, in alternating runs on this machine: BASE=<revision>
# (default the previous commit), ROUNDS=3, BENCH_ARGS=--quick. See the script's header.
bench-ab:
	scripts/bench-ab.sh

# glibc's static libraries ship with the toolchain's target, so this works offline. --listen
# takes an IP address; the one host name the binary may resolve is a postgres:// URL's, which
# static glibc looks up through the machine's own NSS modules (give an IP address, or
# hostaddr=, where those may differ from the build machine's glibc).
static:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --locked --target $(STATIC_TARGET)
	@file target/$(STATIC_TARGET)/release/tenantd 2>/dev/null || true
	@ls -l target/$(STATIC_TARGET)/release/tenantd

clean:
	$(CARGO) clean

# Coverage-guided fuzzing of the create request (fuzz/, libFuzzer through cargo-fuzz) for
# FUZZ_SECONDS; not part of `make test`. cargo-fuzz passes -Z flags, which the stable
# toolchain takes with RUSTC_BOOTSTRAP=1. The corpus grows in fuzz/corpus/ from the seeds in
# fuzz/seeds/; a crash input lands in fuzz/artifacts/ and becomes a test in src/proptests.rs.
FUZZ_SECONDS ?= 300
FUZZ_DIR     := $(CURDIR)/fuzz
fuzz:
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	@mkdir -p $(FUZZ_DIR)/corpus/create_request $(FUZZ_DIR)/target
	@{ RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run --fuzz-dir $(FUZZ_DIR) create_request \
		$(FUZZ_DIR)/corpus/create_request $(FUZZ_DIR)/seeds/create_request -- \
		-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
		-dict=$(FUZZ_DIR)/create_request.dict 2>&1; \
		echo $$? > $(FUZZ_DIR)/target/create_request.status; } \
		| tee $(FUZZ_DIR)/target/create_request.log
	@echo "--- make fuzz: create_request, FUZZ_SECONDS=$(FUZZ_SECONDS)"
	@grep -E '^#[0-9]+' $(FUZZ_DIR)/target/create_request.log | tail -n 1
	@grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
		$(FUZZ_DIR)/target/create_request.log || true
	@ls $(FUZZ_DIR)/artifacts/create_request 2>/dev/null \
		| sed 's|^|finding: fuzz/artifacts/create_request/|'
	@exit $$(cat $(FUZZ_DIR)/target/create_request.status)

# A private PostgreSQL cluster for running tests by hand (scripts/postgres.sh: initdb and
# pg_ctl in PG_DIR, 127.0.0.1 on a free port; installs Debian's postgresql package as root
# if no server is there). postgres-up prints how to export its URLs; postgres-down stops it.
postgres-up:
	@scripts/postgres.sh start $(PG_DIR) >/dev/null
	@echo "export TENANTD_TEST_POSTGRES_URL=\"\$$(cat $(PG_DIR)/url)\""
	@echo "export TENANTD_TEST_POSTGRES_ADMIN_URL=\"\$$(cat $(PG_DIR)/admin-url)\""
	@echo "export TENANTD_TEST_POSTGRES_CA=\"$(PG_DIR)/tls/ca.pem\""

postgres-down:
	@scripts/postgres.sh stop $(PG_DIR)

# Schemathesis (pinned, in .venv-api-fuzz/) against the release binary on 127.0.0.1 with every
# check and the admin token; then SIGTERM (exit 0) and `tenantd audit verify`. Reports land in
# target/api-fuzz/. About 5 minutes (API_FUZZ_EXAMPLES=500, API_FUZZ_MAX_TIME=300); CI runs
# `API_FUZZ_EXAMPLES=100 API_FUZZ_MAX_TIME=60 scripts/api-fuzz.sh`. See the script's header.
api-fuzz:
	scripts/api-fuzz.sh
