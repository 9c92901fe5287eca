#!/bin/bash
cd /tmp/prof
for round in 1 2 3; do
 for arm in base auto4000; do
  case $arm in base) e=();; auto4000) e=(FLARE_EXP_AUTOCKPT=4000);; esac
  env "${e[@]}" RUST_LOG=error /tmp/flare-ckpt bench waiters --events 100000 --reps 1 --json --scattered-keys > b-$arm-$round.json 2> b-$arm-$round.err
  { echo "== waiters $arm $round"; python3 -c "
import json; d=json.load(open('b-$arm-$round.json'))['samples'][0]; print(*(f'{k}={d[k]:.3f}' for k in ['matching_waiters_cost_ratio','matching_first_per_s','matching_few_waiters_per_s','matching_per_s','interleaved_non_matching_ratio','starting_one_run_per_s','no_waiters_per_s','non_matching_per_s']))"; } >> ab2.txt
 done
 for sc in e2e latency; do for arm in base auto4000; do
  case $arm in base) e=();; auto4000) e=(FLARE_EXP_AUTOCKPT=4000);; esac
  env "${e[@]}" RUST_LOG=error /tmp/flare-ckpt bench $sc --reps 1 --json > s-$sc-$arm-$round.json 2> s-$sc-$arm-$round.err
  { echo "== $sc $arm $round"; python3 -c "
import json; d=json.load(open('s-$sc-$arm-$round.json'))['samples'][0]; print({k:round(v,3) for k,v in d.items() if isinstance(v,(int,float))})"; } >> ab2.txt
 done; done
done
