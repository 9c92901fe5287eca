#!/bin/sh
# Alternated rounds, SQLite, scattered keys, one repetition each: 21890a9 (/tmp/vs/flare-old)
# against the set rebuilt on lookups in vain, without the delete trigger (/tmp/vs/flare-vs2).
cd "$(dirname "$0")"
for round in 1 2 3; do
  for b in vs2 old; do
    RUST_LOG=error /tmp/vs/flare-$b bench waiters --events 100000 --reps 1 --json --scattered-keys \
      >> ab2-$b.jsonl
  done
done
