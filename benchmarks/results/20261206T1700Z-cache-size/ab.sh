#!/bin/sh
# Each connection's page cache at 8 MiB (kept), 16 MiB and 32 MiB, alternated: four rounds of
# four repetitions of `flare bench fan-in --children 10000`.
cd "$(dirname "$0")"
for round in 1 2 3 4; do for v in -8192 -16384 -32768; do
  XP_CACHE=$v RUST_LOG=error /tmp/flare-cache bench fan-in --children 10000 --reps 4 --json > c$v-$round.jsonl
done; done
