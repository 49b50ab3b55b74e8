#!/usr/bin/env bash
# `make bench-ab`: the load benchmark against two builds in alternating runs on one machine,
# so that what the host does meanwhile (steal time, other work) falls on both sides alike;
# the order within a round flips every round.
#
#   BASE=<git revision>   the build to compare against (default: the previous commit)
#   ROUNDS=N              runs of each side, alternating base, new, base, new, … (default 3)
#   BENCH_ARGS="…"        passed to every run (default --quick)
#
# The base is built from a detached worktree of BASE into target/bench-ab/base-target; the
# new side is the working tree's release build. Every run's table lands in
# target/bench-ab/, and the summary (the median of each row's figures per side, and new ÷
# base) is printed and written to target/bench-ab/summary.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
base_rev=${BASE:-HEAD~1}
rounds=${ROUNDS:-3}
bench_args=${BENCH_ARGS:---quick}
out="$root/target/bench-ab"
worktree=$(mktemp -d "${TMPDIR:-/tmp}/tenantd-bench-base.XXXXXX")

cleanup() {
    git -C "$root" worktree remove --force "$worktree" >/dev/null 2>&1 || rm -rf "$worktree"
}
trap cleanup EXIT

mkdir -p "$out"
rm -f "$out"/*.md
base_sha=$(git -C "$root" rev-parse --short "$base_rev")
new_sha=$(git -C "$root" rev-parse --short HEAD)
if ! git -C "$root" diff --quiet HEAD; then
    new_sha="$new_sha+changes"
fi
echo "bench-ab: base $base_rev ($base_sha), new $new_sha; $rounds rounds of: $bench_args"

git -C "$root" worktree add --detach "$worktree" "$base_rev" >/dev/null 2>&1
echo "bench-ab: building the base"
CARGO_TARGET_DIR="$out/base-target" cargo build --release --locked \
    --manifest-path "$worktree/Cargo.toml" --bin tenantd 2>&1 | tail -n 1
echo "bench-ab: building the new side and the load generator"
(cd "$root" && cargo build --release --locked --bin tenantd 2>&1 | tail -n 1)

base_bin="$out/base-target/release/tenantd"
new_bin="$root/target/release/tenantd"
for round in $(seq 1 "$rounds"); do
    # The order flips every round, so that neither side always runs right after the other
    # (whose deleted database the kernel may still be writing back).
    order="base new"
    [ $((round % 2)) -eq 0 ] && order="new base"
    for side in $order; do
        bin=$base_bin
        [ "$side" = new ] && bin=$new_bin
        echo "bench-ab: round $round/$rounds, $side"
        # shellcheck disable=SC2086 # the arguments are meant to split
        (cd "$root" && cargo bench --locked --bench load -- $bench_args --server "$bin") \
            > "$out/$side-$round.md" 2> "$out/$side-$round.log"
    done
done

python3 - "$out" "$rounds" "$base_rev ($base_sha)" "$new_sha" <<'PY'
import re, statistics, sys
out, rounds, base_name, new_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def rows(path):
    """The benchmark table's rows: workload -> (requests/s, p50 ms, p99 ms, CPU µs/req)."""
    found, cpu = {}, None
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "workload":
            # The CPU column is found by its name: columns have been added after it before.
            cpu = next(i for i, c in enumerate(cells) if c.startswith("server CPU"))
            continue
        if cpu is None or len(cells) <= cpu or not re.match(r"^\d+$", cells[1]):
            continue
        ms = lambda c: float(c.split()[0])
        found[cells[0]] = (float(cells[1]), ms(cells[2]), ms(cells[3]), float(cells[cpu]))
    return found

sides = {s: [rows(f"{out}/{s}-{r}.md") for r in range(1, rounds + 1)] for s in ("base", "new")}
workloads = list(sides["new"][0].keys())
lines = [
    f"A/B over {rounds} alternating rounds per side; each figure is the median of its rounds.",
    f"base: {base_name}; new: {new_name}.",
    "",
    "| workload | req/s base | req/s new | new ÷ base | p99 base | p99 new | CPU µs/req base | CPU µs/req new |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
]
for w in workloads:
    med = lambda side, i: statistics.median(run[w][i] for run in sides[side] if w in run)
    b, n = med("base", 0), med("new", 0)
    lines.append(
        f"| {w} | {b:.0f} | {n:.0f} | {n / b:.2f} | {med('base', 2):.2f} ms | {med('new', 2):.2f} ms "
        f"| {med('base', 3):.1f} | {med('new', 3):.1f} |"
    )
text = "\n".join(lines) + "\n"
open(f"{out}/summary.md", "w").write(text)
print(text)
PY
