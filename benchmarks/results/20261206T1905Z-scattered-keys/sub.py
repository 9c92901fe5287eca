import sys, collections, subprocess
sys.path.insert(0,'/tmp')
exec(open(__file__.replace('sub.py','deep.py')).read().split('for path in')[0])
c=collections.Counter(); leaf=collections.Counter()
for comm,frames in stacks(sys.argv[1]):
    if not comm.startswith('flare-sqlite-wr'): continue
    if not any('waits::on_event' in f for f in frames): continue
    i=next(j for j,f in enumerate(frames) if 'waits::on_event' in f)
    sub=[f[:34] for f in frames[:i] if not f.startswith('flare') ]
    sub=list(reversed(sub))
    c[' > '.join(sub[2:7])]+=1
    leaf[frames[0][:50]]+=1
for k,v in c.most_common(14): print('  %5d %s'%(v,k))
print('leaf')
for k,v in leaf.most_common(14): print('  %5d %s'%(v,k))
