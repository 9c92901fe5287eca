#!/bin/bash
# usage: exp2.sh rounds reps "label:ENV=VAL ..." ...
rounds=$1; reps=$2; shift 2
for r in $(seq $rounds); do for spec in "$@"; do
  label=${spec%%:*}; envs=${spec#*:}
  env $envs RUST_LOG=error ${FLARE:-/tmp/flare-exp} bench fan-in --children 10000 --reps $reps --json 2>/dev/null | python3 -c "
import sys,json
out={}
for l in sys.stdin:
  d=json.loads(l)
  out[d['scenario']]=d
f=out['fan-in']; dr=out['fan-in drain']
print('$label', 'ratio', ' '.join('%.3f'%s['vs_seeded_drain'] for s in f['samples']), 'fan cps %d'%f['median']['children_per_s'], 'seeded drain %d'%dr['median']['seeded_drain_per_s'], 'drain %d'%dr['median']['runs_per_s'], 'seed %d'%dr['median']['seed_events_per_s'])
"
done; done
