#!/bin/bash
# alternated arms; one rep each per round
for round in 1 2 3 4; do
  for arm in base mmap cache; do
    case $arm in
      base) env=();;
      mmap) env=(FLARE_EXP_MMAP=268435456);;
      cache) env=(FLARE_EXP_CACHE=-65536);;
    esac
    env "${env[@]}" RUST_LOG=error /tmp/flare-exp bench waiters --events 100000 --reps 1 --json --scattered-keys > /tmp/exp1/$arm.$round.json 2>/tmp/exp1/$arm.$round.err
    python3 -c "
import json,sys; d=json.load(open('/tmp/exp1/$arm.$round.json'))['samples'][0]
print('$arm $round', *(f'{k}={d[k]:.3f}' for k in ['matching_waiters_cost_ratio','matching_first_per_s','matching_few_waiters_per_s','interleaved_non_matching_ratio','non_matching_ratio','starting_one_run_per_s','no_waiters_per_s']))" >> /tmp/exp1/summary.txt
  done
done
