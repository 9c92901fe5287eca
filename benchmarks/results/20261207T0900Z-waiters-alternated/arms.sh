#!/usr/bin/env bash
# The twenty-first sitting's settings again, now that the matching phases alternate: a build of
# 15a4291 with ../20261207T0620Z-sqlite-matching-pages/{experiments,cache-mmap}.patch applied
# (experiments.patch without its src/bench/waiters.rs part), scattered keys, arms alternated.
set -euo pipefail
cd "$(dirname "$0")"
flare=${FLARE:-../../../target/release/flare}
export RUST_LOG=error
for round in 1 2; do
  for arm in base cache64 auto4000; do
    case $arm in
      base) envs=() ;;
      cache64) envs=(FLARE_EXP_CACHE=-65536) ;;
      auto4000) envs=(FLARE_EXP_AUTOCKPT=4000) ;;
    esac
    line=$(env "${envs[@]}" "$flare" bench waiters --events 100000 --reps 1 --json --scattered-keys 2>/dev/null | tr -d '\n')
    echo "$arm $line" >> arms.jsonl
  done
done
