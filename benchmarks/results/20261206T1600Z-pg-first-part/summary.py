import json,glob,statistics as st,sys
vs=sys.argv[1:] or ['pgtyped','ramp']
med={}
for v in vs:
    for store in ['sqlite','postgres']:
        fan=[];per_round=[]
        for f in sorted(glob.glob(f'both-{v}-*.jsonl')):
            r=[]
            for line in open(f):
                d=json.loads(line)
                if (('postgres' in d['variant'])==(store=='postgres')) and 'drain' not in d['variant']:
                    fan.extend(d['samples']); r.extend(d['samples'])
            per_round.append(st.median(s['children_per_s'] for s in r))
        med[(v,store)]=per_round
        print(v,store,'n=',len(fan),' '.join(f"{k} {st.median(s[k] for s in fan):.3f} ({min(s[k] for s in fan):.3f}-{max(s[k] for s in fan):.3f})" for k in ['children_per_s','vs_seeded_drain','fan_in_secs','first_child_secs','secs']))
for store in ['sqlite','postgres']:
    p=[b/a for a,b in zip(med[(vs[0],store)],med[(vs[1],store)])]
    print('paired children/s',store,f"{st.median(p):.3f}",[round(x,3) for x in p])
