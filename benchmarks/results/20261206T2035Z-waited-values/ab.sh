#!/bin/sh
# Alternated rounds, SQLite, scattered keys, one repetition each: the release build of 21890a9
# (before the set of waited values, /tmp/vs/flare-old) and of the change (/tmp/vs/flare-vs).
cd "$(dirname "$0")"
for round in 1 2 3 4; do
  for b in old vs; do
    RUST_LOG=error /tmp/vs/flare-$b bench waiters --events 100000 --reps 1 --json --scattered-keys \
      >> ab-$b.jsonl
  done
done
