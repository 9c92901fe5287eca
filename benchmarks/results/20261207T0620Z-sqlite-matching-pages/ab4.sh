#!/bin/bash
# five more rounds of waiters, the order of the arms alternating per round
cd "$(dirname "$0")"
for round in 4 5 6 7 8; do
 if [ $((round % 2)) -eq 0 ]; then arms="auto4000 base"; else arms="base auto4000"; fi
 for arm in $arms; do
  case $arm in base) e=();; auto4000) e=(FLARE_EXP_AUTOCKPT=4000);; esac
  env "${e[@]}" RUST_LOG=error /tmp/flare-ckpt bench waiters --events 100000 --reps 1 --json --scattered-keys > b-$arm-$round.json 2> b-$arm-$round.err
 done
done
