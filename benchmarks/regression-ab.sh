#!/usr/bin/env bash
# The sitting of BENCHMARKS.md "Jobs without flow control, before and after" (issue 26): binaries
# alternated in one sitting, raw JSON lines to $OUT. A: before flow control (PRE), the session
# start (START) and this tree (NEW): e2e and drain on SQLite, drain and e2e (steps 0) on
# PostgreSQL. B: this tree's keyed drain and held backlog beside the plain drain. C: fan-in
# (START and NEW) and waiters (NEW). Usage:
#   PRE=/tmp/flare-4ac7aec START=/tmp/flare-start NEW=target/release/flare OUT=benchmarks/results/x benchmarks/regression-ab.sh
set -u
PG=postgres://postgres@127.0.0.1:5432/postgres
OUT=${OUT:-/tmp/sitting}
mkdir -p "$OUT"
PRE=${PRE:?binary before flow control (4ac7aec)}; START=${START:?binary of the session start}; NEW=${NEW:?release binary of this tree}
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT/log.txt"; }
run() { local tag=$1; shift; log "$tag: $*"; RUST_LOG=error "$@" --json >> "$OUT/$tag.jsonl" 2>>"$OUT/err.txt"; }
for round in 1 2 3; do
  for b in PRE START NEW; do
    bin=${!b}
    run "A-$b-e2e" $bin bench e2e --reps 1
    run "A-$b-drain" $bin bench drain --reps 1 --database-url $PG
    run "A-$b-e2e-pg" $bin bench steps --steps 0 --reps 1 --database-url $PG
  done
done
for round in 1 2 3; do
  run "B-NEW-plain20k" $NEW bench drain --events 20000 --keys 0 --reps 1 --database-url $PG
  run "B-NEW-keyed" $NEW bench drain --events 20000 --keys 10000 --reps 1 --database-url $PG
  run "B-NEW-plain100k" $NEW bench drain --events 100000 --reps 1 --database-url $PG
  run "B-NEW-held" $NEW bench drain --events 100000 --held 100000 --reps 1 --database-url $PG
done
for round in 1 2; do
  for b in START NEW; do
    bin=${!b}
    run "C-$b-fan-in" $bin bench fan-in --children 10000 --reps 1 --database-url $PG
  done
done
run "C-NEW-waiters" $NEW bench waiters --events 20000 --reps 3 --database-url $PG
log done
