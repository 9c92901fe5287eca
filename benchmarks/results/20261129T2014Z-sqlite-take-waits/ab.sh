#!/usr/bin/env bash
# Alternated SQLite `bench waiters`: head (894fef9, /tmp/flare-head) and take (/tmp/flare-new,
# discarded: waits without a condition found and
# removed by one DELETE … RETURNING), one repetition per invocation. The outputs flare-head.jsonl
# and flare-new.jsonl were renamed head.jsonl and take.jsonl.
OUT=$1
for round in 1 2 3; do
  for b in /tmp/flare-head /tmp/flare-new; do
    tag=$(basename $b)
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) steal $(grep '^cpu ' /proc/stat | awk '{print $9}') round $round $tag" >> $OUT/log.txt
    RUST_LOG=error $b bench waiters --events 100000 --reps 1 --json >> $OUT/$tag.jsonl 2>>$OUT/err.txt
  done
done
echo done >> $OUT/log.txt
