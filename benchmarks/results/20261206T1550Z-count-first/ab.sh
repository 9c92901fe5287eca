#!/bin/sh
# Alternated A/B on one machine in one sitting: typed = d3bc66b, count = the children's steps
# read straight into a map sized by a count of the index (release builds copied to
# /tmp/flare-typed and /tmp/flare-count). `flare bench fan-in --children 10000` on SQLite,
# twelve rounds of five repetitions. `summary.py typed count` prints summary.txt.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8 9 10 11 12; do
  for v in typed count; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 5 --json > sqlite-$v-$round.jsonl
  done
done
