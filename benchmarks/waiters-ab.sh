#!/usr/bin/env bash
# The sitting of BENCHMARKS.md "Issue 27, a sixth sitting": two release binaries alternated in
# one sitting, `flare bench waiters` (100,000 runs waiting) on SQLite and PostgreSQL, one
# repetition per binary per round; raw JSON lines to $OUT/<tag>.jsonl. Usage:
#   OLD=/tmp/flare-old NEW=target/release/flare OUT=benchmarks/results/x ROUNDS=2 benchmarks/waiters-ab.sh
set -u
PG=postgres://postgres@127.0.0.1:5432/postgres
OUT=${OUT:-/tmp/sitting}
ROUNDS=${ROUNDS:-2}
OLD=${OLD:?the release binary before the change}; NEW=${NEW:?the release binary after it}
mkdir -p "$OUT"
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT/log.txt"; }
for round in $(seq "$ROUNDS"); do
  for b in OLD NEW; do
    log "round $round: $b"
    RUST_LOG=error "${!b}" bench waiters --events 100000 --reps 1 --json --database-url $PG \
      >> "$OUT/$b.jsonl" 2>>"$OUT/err.txt"
  done
done
log done
