#!/bin/bash
cd "$(dirname "$0")"
for round in 1 2 3; do
 for sc in "drain" "fan-in --children 10000"; do for arm in base auto4000; do
  case $arm in base) e=();; auto4000) e=(FLARE_EXP_AUTOCKPT=4000);; esac
  n=${sc%% *}
  env "${e[@]}" RUST_LOG=error /tmp/flare-ckpt bench $sc --reps 1 --json > d-$n-$arm-$round.json 2> d-$n-$arm-$round.err
  { echo "== $n $arm $round"; python3 -c "
import json; d=json.load(open('d-$n-$arm-$round.json'))['samples'][0]; print({k:round(v,3) for k,v in d.items() if isinstance(v,(int,float))})"; } >> ab3.txt
 done; done
done
