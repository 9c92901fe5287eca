#!/bin/sh
# The build before the sets (2c5a7b2) with the probe and the keys of waits skipped altogether
# (FLARE_HACK_NOPROBE, during the non-matching and interleaved phases only), against the same
# build looking up as shipped; PostgreSQL only, alternated.
PG=postgres://postgres@127.0.0.1:5432/postgres
for round in 1 2 3; do
  for v in noprobe probe; do
    case $v in
      noprobe) E="FLARE_HACK_NOPROBE=1";;
      probe) E="";;
    esac
    env $E FLARE_BENCH_PG_ONLY=1 RUST_LOG=error /tmp/vs/flare-hack bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url $PG >> hack-$v.jsonl
    echo "$(date -u +%H:%M:%S) round $round $v done" >> hack-progress.txt
  done
done
