#!/usr/bin/env bash
OUT=$1
for round in 1 2 3; do
  for b in /tmp/flare-head /tmp/flare-paths; do
    tag=$(basename $b)
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) steal $(grep '^cpu ' /proc/stat | awk '{print $9}') round $round $tag" >> $OUT/log.txt
    RUST_LOG=error $b bench waiters --events 100000 --reps 1 --json >> $OUT/$tag.jsonl 2>>$OUT/err.txt
  done
done
echo done >> $OUT/log.txt
