#!/usr/bin/env bash
# Issue 26's sitting (BENCHMARKS.md, "Flow control: the keyed drain and old/new alternated"):
# binaries alternated in one sitting, raw JSON lines to $OUT. Usage:
#   NEW=target/release/flare BASE=/tmp/flare-base PRE=/tmp/flare-preflow OUT=benchmarks/results/x benchmarks/flow-ab.sh
set -u
PG=postgres://postgres@127.0.0.1:5432/postgres
OUT=${OUT:-/tmp/sitting}
mkdir -p "$OUT"
NEW=${NEW:?release binary of this tree}; BASE=${BASE:?binary of the session start}; PRE=${PRE:?binary before flow control (68ccd54^)}
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT/log.txt"; }
run() { local tag=$1; shift; log "$tag: $*"; RUST_LOG=error "$@" --json >> "$OUT/$tag.jsonl" 2>>"$OUT/err.txt"; }
# A: jobs without flow control, before flow control (PRE) and now (NEW), alternated, 3 rounds.
for round in 1 2 3; do
  for b in PRE NEW; do
    bin=${!b}
    run "A-$b-e2e" $bin bench e2e --reps 1
    run "A-$b-drain-sqlite" $bin bench drain --reps 1
    run "A-$b-drain-pg" $bin bench drain --reps 1 --database-url $PG
    run "A-$b-e2e-pg" $bin bench steps --steps 0 --reps 1 --database-url $PG
  done
done
# B: keyed and held, start of session (BASE) and now (NEW), alternated per rep.
for round in 1 2 3; do
  for b in BASE NEW; do
    bin=${!b}
    run "B-$b-plain" $bin bench drain --events 20000 --reps 1 --keys 0 --database-url $PG
    run "B-$b-keyed" $bin bench drain --events 20000 --reps 1 --keys 10000 --database-url $PG
  done
  run "B-NEW-held" $NEW bench drain --events 20000 --reps 1 --held 100000 --database-url $PG
done
log done
