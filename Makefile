# tenantd: `make run` starts a demo; `make test` runs every check.

CARGO      ?= cargo
LISTEN     ?= 127.0.0.1:8080
DB         ?= ./tenantd.db
TOKEN_FILE ?= ./admin.token
BIN        := target/release/tenantd
STATIC_TARGET := x86_64-unknown-linux-gnu

.PHONY: run build test bench crash-test static clean help

help:
	@echo "make run     build the release binary and serve a demo on $(LISTEN)"
	@echo "make test    formatting, lints and every test"
	@echo "make crash-test  kill -9 cycles under load (CRASH_CYCLES=200)"
	@echo "make bench   the load benchmark (BENCH_ARGS=--quick for a short run)"
	@echo "make static  a statically linked binary in target/$(STATIC_TARGET)/release/"

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
	@echo "try, from another terminal in this directory:"
	@echo "  curl -s -X POST http://$(LISTEN)/v1/tenants \\"
	@echo "    -H \"Authorization: Bearer \$$(cat $(TOKEN_FILE))\" \\"
	@echo "    -H 'Content-Type: application/json' \\"
	@echo "    -d '{\"name\":\"acme-prod\",\"opening_deposit_atomic\":\"1000\"}'"
	@echo "stop with Ctrl-C"
	@exec $(BIN) serve --listen "$(LISTEN)" --db "$(DB)" --admin-token-file "$(TOKEN_FILE)"

test:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings
	$(CARGO) test --release --locked
	$(CARGO) bench --locked --bench load -- --smoke

# kill -9 at random instants under creates and tombstones, CRASH_CYCLES times (CI runs 10).
CRASH_CYCLES ?= 200
crash-test:
	CRASH_CYCLES=$(CRASH_CYCLES) $(CARGO) test --release --locked --test api crash -- --nocapture

# The full benchmark takes a few minutes; BENCH_ARGS="--quick" runs one in under a minute.
bench:
	$(CARGO) bench --locked --bench load -- $(BENCH_ARGS)

# glibc's static libraries ship with the toolchain's target, so this works offline. The
# binary resolves no host names (--listen takes an IP address), so static glibc is safe.
static:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --locked --target $(STATIC_TARGET)
	@file target/$(STATIC_TARGET)/release/tenantd 2>/dev/null || true
	@ls -l target/$(STATIC_TARGET)/release/tenantd

clean:
	$(CARGO) clean
