#!/bin/bash
# eight minutes of the soak per arm, base first
cd "$(dirname "$0")"
for arm in base auto4000; do
  case $arm in base) e=();; auto4000) e=(FLARE_EXP_AUTOCKPT=4000);; esac
  env "${e[@]}" RUST_LOG=error /tmp/flare-ckpt bench soak --soak-secs 480 --sample-secs 60 > soak-$arm.txt 2>&1
done
