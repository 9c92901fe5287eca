#!/bin/sh
# Alternated A/B, not kept: new2 = ca2f676 (the replay by key), pipe = ca2f676 with
# pipelined.patch (each part of a SQLite fan-out handed to the writer once the one before has
# begun there). Release builds copied to /tmp/flare-new2 and /tmp/flare-pipe.
# `flare bench fan-in --children 10000` on SQLite, eight rounds of five. summary.py -> summary.txt.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8; do
  for v in new2 pipe; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 5 --json > sqlite-$v-$round.jsonl
  done
done
