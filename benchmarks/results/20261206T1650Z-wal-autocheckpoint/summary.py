import json,glob,statistics as st,sys,os
d=os.path.dirname(os.path.abspath(__file__)); prefix=sys.argv[1]; variants=sys.argv[2:]
for v in variants:
    fan=[];ratio=[];seeded=[]; drain=[]
    for f in glob.glob(f'{d}/{prefix}{v}-*.jsonl'):
        for l in open(f):
            x=json.loads(l)
            for s in x['samples']:
                if x['scenario']=='fan-in': fan.append(s['children_per_s']); ratio.append(s['vs_seeded_drain'])
                else: seeded.append(s['seeded_drain_per_s']); drain.append(s['runs_per_s'])
    print(v,'n=',len(fan),'fan-in children/s',round(st.median(fan)),'seeded drain/s',round(st.median(seeded)),'drain runs/s',round(st.median(drain)),'fan-in/(seeding+drain)',round(st.median(ratio),3))
