#!/bin/bash
cd /tmp/prof
for round in 1 2; do for arm in base auto4000 mmap; do
  case $arm in base) e=();; auto4000) e=(FLARE_EXP_AUTOCKPT=4000);; mmap) e=(FLARE_EXP_MMAP=1073741824);; esac
  env "${e[@]}" RUST_LOG=error /tmp/flare-ckpt bench waiters --events 100000 --reps 1 --json --scattered-keys > a-$arm-$round.json 2> a-$arm-$round.err
  { echo "== $arm $round"; grep EXP a-$arm-$round.err | grep -v before | cut -c1-200; python3 -c "
import json; d=json.load(open('a-$arm-$round.json'))['samples'][0]; print(*(f'{k}={d[k]:.3f}' for k in ['matching_waiters_cost_ratio','matching_first_per_s','matching_few_waiters_per_s','matching_per_s','interleaved_non_matching_ratio','starting_one_run_per_s','no_waiters_per_s','non_matching_per_s']))"; } >> arms.txt
done; done
