#!/usr/bin/env bash
# Alternated SQLite benchmarks: head = 894fef9 (/tmp/flare-head), mem = the same code built with
# .cargo/config.toml's LIBSQLITE3_FLAGS (/tmp/flare-mem), one repetition per invocation.
OUT=$1
for round in 1 2 3; do
  for b in /tmp/flare-head /tmp/flare-mem; do
    tag=$(basename $b)
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) round $round $tag" >> $OUT/log.txt
    RUST_LOG=error $b bench waiters --events 100000 --reps 1 --json >> $OUT/$tag-waiters.jsonl 2>>$OUT/err.txt
    RUST_LOG=error $b bench fan-in --children 10000 --reps 1 --json >> $OUT/$tag-fan-in.jsonl 2>>$OUT/err.txt
    RUST_LOG=error $b bench e2e --events 50000 --reps 1 --json >> $OUT/$tag-e2e.jsonl 2>>$OUT/err.txt
  done
done
echo done >> $OUT/log.txt
