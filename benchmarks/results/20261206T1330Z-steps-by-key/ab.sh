#!/bin/sh
# Alternated A/B on one machine in one sitting: base = 5647858, new2 = the replay by key
# (release builds copied to /tmp/flare-base and /tmp/flare-new2). `flare bench fan-in
# --children 10000` on SQLite, eight rounds of five repetitions. `summary.py` prints summary.txt.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8; do
  for v in base new2; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 5 --json > sqlite-$v-$round.jsonl
  done
done
