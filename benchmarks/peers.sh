#!/usr/bin/env bash
# The peer job queues of shared/bench/peers, in a subset that fits one sitting (~10–15 min at the
# default N), so their figures are taken on the same box, in the same hour, as Flare's:
# graphile-worker, pg-boss, BullMQ (in-memory Redis on 127.0.0.1:6379) and apalis, RUNS runs each
# (default 1), in the variants BENCHMARKS.md compares with: graphile-worker default and batched,
# pg-boss batched10 (its default polls every 2 s: a drain cut at 20 s), BullMQ default, apalis
# pubsub-poll (pubsub alone can miss wake-ups for ~30 s). See the peers' README for the variants.
#
#   benchmarks/peers.sh                      # from the repository root
#   N=2000 LAT_SECONDS=2 benchmarks/peers.sh # a quick check that everything runs
#
# The peers' directory is read-only (shared), so its sources are copied to a work directory
# (PEERS_WORK, default ~/.cache/flare-peers) where `npm install` (only when node_modules is
# missing) and the release build of apalis (once; cargo rebuilds nothing afterwards) happen.
# Every command runs under `nice -n 19 ionice -c3`: the box is shared.
#
# Needs: PostgreSQL on 127.0.0.1:5432 with trust auth for `postgres` (the databases bench_graphile,
# bench_pgboss and bench_apalis are created when missing), Redis on 127.0.0.1:6379, Node and npm
# (the peers need Node >= 22.18: with an older system node, the npm `node` devDependency provides
# Node 24), cargo.
#
# Output: the raw JSON lines (one per run) in benchmarks/results/<UTC stamp>-peers.jsonl, then a
# table of the medians: enqueue 1 at a time (jobs/s, p50 ms), enqueue with 10 callers (jobs/s),
# drain (jobs/s), e2e latency at LAT_RATE (p50/p99 ms).
#
# Env: PEERS_DIR (default /work/shared/bench/peers), PEERS_WORK, RUNS (1), PEERS (peer[:variant]
# entries, default "graphile-worker graphile-worker:batched pg-boss:batched10 bullmq
# apalis:pubsub-poll"; also `graphile-keyed`, ours: graphile-worker draining N jobs over KEYS
# queue names, KEYS=0 for none — see benchmarks/graphile-keyed.mjs), and the peers' own knobs, passed through: N (20000),
# CONCURRENCY, PRODUCERS, BULK_BATCH, LAT_RATE, LAT_SECONDS, DRAIN_TIMEOUT_S, RUN_TIMEOUT_S (300 s
# per run), PGURL (per peer default), REDIS_PORT.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
src="${PEERS_DIR:-/work/shared/bench/peers}"
work="${PEERS_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/flare-peers}"
runs="${RUNS:-1}"
peers="${PEERS:-graphile-worker graphile-worker:batched pg-boss:batched10 bullmq apalis:pubsub-poll}"
pg="postgres://postgres@127.0.0.1:5432"
low=(nice -n 19 ionice -c3)
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$repo/benchmarks/results/$stamp-peers.jsonl"

[ -f "$src/lib/common.mjs" ] || { echo "no peer benchmarks in $src (set PEERS_DIR)" >&2; exit 2; }

# 1. A writable copy of the peers' sources (node_modules and apalis/target are kept between runs).
mkdir -p "$work/lib" "$work/apalis/src"
cp "$src"/*.mjs "$src"/package.json "$src"/package-lock.json "$work/"
cp "$src"/lib/*.mjs "$work/lib/"
cp "$repo"/benchmarks/graphile-keyed.mjs "$work/"   # ours: graphile-worker's queue_name per key
cp "$src"/apalis/Cargo.toml "$work/apalis/"
[ -f "$src/apalis/Cargo.lock" ] && cp "$src/apalis/Cargo.lock" "$work/apalis/"
cp -r "$src"/apalis/src/. "$work/apalis/src/"
cd "$work"

# 2. Node: the peers need >= 22.18; the devDependency `node` brings Node 24 when the system's is older.
echo "# system node $(node --version 2>/dev/null || echo missing), npm $(npm --version 2>/dev/null || echo missing)" >&2
if [ ! -d node_modules ]; then
  # npm ci rejects this lock file on npm 10 (optional platform packages): install, as the README says.
  "${low[@]}" npm install --no-audit --no-fund >&2
fi
NODE=node
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a==22&&b>=18)?0:1)' 2>/dev/null; then
  NODE="$work/node_modules/.bin/node"
fi
echo "# peers run on node $("$NODE" --version)" >&2

# 3. Servers and databases.
pg_isready -h 127.0.0.1 -p 5432 -q || { echo "PostgreSQL is not answering on 127.0.0.1:5432" >&2; exit 1; }
for db in bench_graphile bench_pgboss bench_apalis; do
  psql "$pg/postgres" -tAc "select 1 from pg_database where datname='$db'" | grep -q 1 \
    || psql "$pg/postgres" -qc "create database $db" >&2
done
case " $peers " in *" bullmq"*)
  redis-cli -h 127.0.0.1 -p "${REDIS_PORT:-6379}" ping >/dev/null \
    || { echo "Redis is not answering on 127.0.0.1:${REDIS_PORT:-6379}" >&2; exit 1; } ;;
esac

# 4. apalis: one release build (a no-op when already built).
case " $peers " in *" apalis"*)
  (cd apalis && CARGO_TARGET_DIR="$work/apalis/target" "${low[@]}" cargo build --release --quiet) ;;
esac

# 5. The runs.
mkdir -p "$(dirname "$out")"
unset VARIANT
for entry in $peers; do
  peer="${entry%%:*}"
  variant=""  # empty: the peer's default variant (an inherited VARIANT is dropped)
  [ "$peer" != "$entry" ] && variant="${entry#*:}"
  case "$peer" in
    graphile-worker) cmd=("$NODE" graphile_worker.mjs) ;;
    graphile-keyed) cmd=("$NODE" graphile-keyed.mjs) ;;   # KEYS=0|10000: plain or keyed drain
    pg-boss) cmd=("$NODE" pg_boss.mjs) ;;
    bullmq) cmd=("$NODE" bullmq.mjs) ;;
    apalis) cmd=(apalis/target/release/apalis-peer-bench) ;;
    *) echo "unknown peer $peer (graphile-worker, graphile-keyed, pg-boss, bullmq, apalis)" >&2; exit 2 ;;
  esac
  for i in $(seq "$runs"); do
    echo "# $entry run $i/$runs" >&2
    # A stuck run is cut and skipped; the others go on.
    env ${variant:+VARIANT="$variant"} QUIET="${QUIET:-1}" timeout "${RUN_TIMEOUT_S:-300}" "${low[@]}" "${cmd[@]}" | grep '^{' >>"$out" \
      || echo "# $entry run $i failed or timed out" >&2
  done
done
echo "# raw lines: $out" >&2

# 6. The table of medians.
"$NODE" --input-type=module - "$out" <<'EOF'
import { readFileSync } from "node:fs";
const rows = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
const med = (xs) => { const s = xs.filter((x) => typeof x === "number").sort((a, b) => a - b); if (!s.length) return NaN; const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const cols = [
  ["enq 1/s", "enqueue_single_jobs_per_s", 0], ["enq p50 ms", "enqueue_single_call_p50_ms", 2],
  ["enq c10/s", "enqueue_single_c10_jobs_per_s", 0], ["drain/s", "drain_jobs_per_s", 0],
  ["e2e p50 ms", "e2e_p50_ms", 2], ["e2e p99 ms", "e2e_p99_ms", 2],
];
const groups = new Map();
for (const r of rows) { const k = `${r.peer} (${r.variant})`; groups.set(k, [...(groups.get(k) || []), r]); }
const table = [["peer", "runs", "N", ...cols.map((c) => c[0])]];
for (const [k, rs] of groups) {
  const cut = rs.some((r) => Object.keys(r).some((f) => f.endsWith("_incomplete") && r[f])) ? " *" : "";
  table.push([k + cut, String(rs.length), String(rs[0].n), ...cols.map(([, f, d]) => med(rs.map((r) => r[f])).toFixed(d))]);
}
const w = table[0].map((_, i) => Math.max(...table.map((r) => r[i].length)));
for (const r of table) console.log(r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join("  "));
if (!groups.size) { console.log("no run produced a result"); process.exit(1); }
if (table.some((r) => r[0].endsWith(" *"))) console.log("* a drain hit its timeout (pg-boss default polls: its drain is cut and reported as a rate)");
EOF
