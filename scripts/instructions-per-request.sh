#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: a measure of the server's CPU cost
# that does not move with what else the host is doing (steal time, other load), for comparing
# two builds where `make bench-ab` is too noisy to show a few per cent.
#
#   scripts/instructions-per-request.sh BINARY [WORKLOAD ...]
#
# Workloads: healthz, read (admin token), own (each tenant's own token), create, spend
# (reserve then commit, in turn, each tenant's own token; a reserve and a commit each count as
# a request), charge (a charge of 1, each tenant's own token), leaf (the same on a budget with
# three ancestors), batch (a batch of 100 charges of 1 on one budget, each tenant's own token:
# divide by 100 for an operation's share), leafbatch (the same on a budget with three
# ancestors), credit (a credit of 1, the admin token) and spread (a charge of 1 from each of 32
# connections at once, over 1,000 tenants, so that the writer's batches hold many budgets, as
# in `make bench`). With INSTR_KEEP=DIR, each
# run's callgrind output is kept there, for callgrind_annotate; INSTR_FLAGS adds serve flags
# (for example INSTR_FLAGS="--rate-limit 1000000/s"). With INSTR_ENDPOINTS=K, K webhook endpoints subscribed to every event are
# made after the seeding, before the requests (pointing at a closed port on 127.0.0.1; the server runs with
# --webhook-allow-http --webhook-allow-private). Each runs
# the binary under callgrind (every thread counted) twice, with N and 3N requests on one
# keep-alive connection from a small Python client, and prints (Ir(3N) - Ir(N)) / 2N, so
# start-up, seeding and shutdown cancel out. N is 1000 (INSTR_N to change it). Needs
# valgrind, python3 and curl; takes about a minute per workload.
set -euo pipefail

bin=$(realpath "$1")
shift
workloads=("$@")
[ ${#workloads[@]} -eq 0 ] && workloads=(healthz read own create)
n=${INSTR_N:-1000}
endpoints=${INSTR_ENDPOINTS:-0}

client=$(mktemp)
trap 'rm -f "$client"' EXIT
cat > "$client" <<'PY'
import http.client, json, sys, threading
port, token, kind, n = int(sys.argv[1]), open(sys.argv[2]).read().strip(), sys.argv[3], int(sys.argv[4])
endpoints = int(sys.argv[5])
conn = http.client.HTTPConnection("127.0.0.1", port)
def request(method, path, body=None, auth=token, conn=conn):
    headers = {"Authorization": "Bearer " + auth}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    assert response.status in (200, 201), (response.status, data)
    return data
tenants = []
seeded = {"spread": 1000}.get(kind, 200 if kind in ("read", "own", "spend", "charge", "credit", "leaf", "batch", "leafbatch") else 0)
for i in range(seeded):
    made = json.loads(request("POST", "/v1/tenants", json.dumps({"name": f"seed-{i}", "opening_deposit_atomic": "1000000"})))
    env = made["sidecar_config_env"]
    path, budget = "/v1/tenants/" + made["id"], env["TENANTD_BUDGET_ID"]
    # A leaf: three budgets, each under the last, below the default budget.
    for level in range(3 if kind in ("leaf", "leafbatch") else 0):
        body = {"name": f"level-{level}", "opening_deposit_atomic": "1000000", "parent_id": budget}
        budget = json.loads(request("POST", path + "/budgets", json.dumps(body)))["id"]
    tenants.append((path, env["TENANTD_TENANT_TOKEN"], budget))
# After the seeding, so that only the measured requests' events (if any) are delivered.
for i in range(endpoints):
    request("POST", "/v1/webhook-endpoints", json.dumps({"url": f"http://127.0.0.1:9/hook-{i}"}))
if kind == "spread":
    # 32 connections take the requests' numbers in turn; tenant i * 7919 mod 1,000 for the
    # i-th, so that a batch's budgets are spread over all of them.
    numbers, lock = iter(range(n)), threading.Lock()
    def spend():
        own_conn = http.client.HTTPConnection("127.0.0.1", port)
        while True:
            with lock:
                i = next(numbers, None)
            if i is None:
                return
            path, own, budget = tenants[(i * 7919) % len(tenants)]
            body = json.dumps({"budget_id": budget, "amount_atomic": "1"})
            request("POST", path + "/charges", body, auth=own, conn=own_conn)
    workers = [threading.Thread(target=spend) for _ in range(32)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    sys.exit(0)
held = None
for i in range(n):
    if kind == "healthz":
        request("GET", "/healthz")
    elif kind == "read":
        request("GET", tenants[i % len(tenants)][0])
    elif kind == "own":
        path, own, _ = tenants[i % len(tenants)]
        request("GET", path, auth=own)
    elif kind == "create":
        request("POST", "/v1/tenants", json.dumps({"name": f"create-{i}", "opening_deposit_atomic": "1000"}))
    elif kind in ("charge", "leaf"):
        path, own, budget = tenants[i % len(tenants)]
        request("POST", path + "/charges", json.dumps({"budget_id": budget, "amount_atomic": "1"}), auth=own)
    elif kind in ("batch", "leafbatch"):
        path, own, budget = tenants[i % len(tenants)]
        charge = {"op": "charge", "budget_id": budget, "amount_atomic": "1"}
        request("POST", path + "/batch", json.dumps({"operations": [charge] * 100}), auth=own)
    elif kind == "credit":
        path, _, budget = tenants[i % len(tenants)]
        request("POST", f"{path}/budgets/{budget}/credits", '{"amount_atomic": "1"}')
    elif kind == "spend" and held is None:
        path, own, budget = tenants[(i // 2) % len(tenants)]
        body = json.dumps({"budget_id": budget, "amount_atomic": "1"})
        held = (path, own, json.loads(request("POST", path + "/reservations", body, auth=own))["id"])
    elif kind == "spend":
        path, own, id = held
        request("POST", f"{path}/reservations/{id}/commit", '{"amount_atomic": "1"}', auth=own)
        held = None
    else:
        sys.exit(f"unknown workload {kind}")
PY

webhook_flags=()
[ "$endpoints" -gt 0 ] && webhook_flags=(--webhook-allow-http --webhook-allow-private)

# Total instructions of one run of `kind` with `count` requests.
instructions() {
    local kind=$1 count=$2 dir port pid
    dir=$(mktemp -d)
    head -c 32 /dev/urandom | od -An -vtx1 | tr -d ' \n' > "$dir/token"
    port=$((20000 + RANDOM % 20000))
    valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
        "$bin" serve --listen "127.0.0.1:$port" --db "$dir/t.db" --admin-token-file "$dir/token" \
        "${webhook_flags[@]}" ${INSTR_FLAGS:-} \
        > "$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 150); do
        curl -s -o /dev/null "127.0.0.1:$port/healthz" && break
        sleep 0.2
    done
    python3 "$client" "$port" "$dir/token" "$kind" "$count" "$endpoints"
    kill -TERM "$pid"
    wait "$pid"
    grep -E '^(summary|totals):' "$dir/callgrind.out" | head -n 1 | awk '{print $2}'
    if [ -n "${INSTR_KEEP:-}" ]; then
        mkdir -p "$INSTR_KEEP"
        cp "$dir/callgrind.out" "$INSTR_KEEP/callgrind.$kind.$count.out"
    fi
    rm -rf "$dir"
}

for kind in "${workloads[@]}"; do
    once=$(instructions "$kind" "$n")
    thrice=$(instructions "$kind" $((3 * n)))
    echo "$kind: $(( (thrice - once) / (2 * n) )) instructions per request"
done
