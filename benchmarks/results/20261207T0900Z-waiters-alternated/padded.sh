#!/usr/bin/env bash
# Keys that sort alike in both databases: `padded-keys.patch` (on 34ba77b) makes the plain keys
# eight-digit strings, so the first tenth's lookups and deletes fall on the first tenth of
# `run_waits_match` beside 100,000 waits as beside 10,000. Alternated with the plain keys.
set -euo pipefail
cd "$(dirname "$0")"
flare=${FLARE:-../../../target/release/flare}
export RUST_LOG=error
for round in 1 2; do
  for arm in padded plain; do
    if [ $arm = padded ]; then export FLARE_EXP_PADDED=1; else unset FLARE_EXP_PADDED; fi
    line=$("$flare" bench waiters --events 100000 --reps 1 --json 2>/dev/null | tr -d '\n')
    echo "$arm $line" >> padded.jsonl
  done
done
