import json,glob,statistics as st,sys
vs=sys.argv[1:] or ['base','new2']
def load(v,r):
    out={'fan':[], 'drain':[]}
    for line in open(f'sqlite-{v}-{r}.jsonl'):
        d=json.loads(line)
        out['drain' if 'drain' in d['variant'] else 'fan'].extend(d['samples'])
    return out
rounds=sorted({int(f.split('-')[-1].split('.')[0]) for f in glob.glob(f'sqlite-{vs[0]}-*.jsonl')})
agg={v:{} for v in vs}; paired=[]
for r in rounds:
    m={}
    for v in vs:
        d=load(v,r)
        for s in d['fan']:
            for k in ['children_per_s','vs_seeded_drain','fan_in_secs','first_child_secs','secs']:
                agg[v].setdefault(k,[]).append(s[k])
        for s in d['drain']:
            agg[v].setdefault('seeded_drain_secs',[]).append(s['secs']+s['seed_secs'])
        m[v]=st.median(s['children_per_s'] for s in d['fan'])
    paired.append(m[vs[1]]/m[vs[0]])
for v in vs:
    print(v,'n=',len(agg[v]['secs']),' '.join(f"{k} {st.median(x):.3f} ({min(x):.3f}-{max(x):.3f})" for k,x in agg[v].items()))
print('paired children/s', f"{st.median(paired):.3f}", [round(p,3) for p in paired])
