#!/bin/sh
# Where PostgreSQL's non-matching gap comes from: the interleaved rounds with the second slot's
# events of the unwaited name too (AA), with the first slot's keys fresh instead of the same
# 10,000 every round (FRESH), and both; PostgreSQL only, one repetition each, alternated.
PG=postgres://postgres@127.0.0.1:5432/postgres
for round in 1 2; do
  for v in aa fresh aafresh plain; do
    case $v in
      aa) E="FLARE_BENCH_AA=1";;
      fresh) E="FLARE_BENCH_FRESH=1";;
      aafresh) E="FLARE_BENCH_AA=1 FLARE_BENCH_FRESH=1";;
      plain) E="";;
    esac
    env $E FLARE_BENCH_PG_ONLY=1 RUST_LOG=error /tmp/vs/flare-exp bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url $PG >> aa-$v.jsonl
    echo "$(date -u +%H:%M:%S) round $round $v done" >> aa-progress.txt
  done
done
