import sys, collections, subprocess, re
def stacks(path):
    out = subprocess.run(['perf','script','-i',path,'-F','comm,tid,ip,sym'],capture_output=True,text=True).stdout
    cur=None; frames=[]
    for line in out.split('\n'):
        if not line.strip():
            if cur is not None: yield cur, frames
            cur=None; frames=[]; continue
        if not line.startswith('\t') and not line.startswith(' '):
            cur=line.split()[0]; continue
        parts=line.strip().split(None,1)
        frames.append(parts[1] if len(parts)>1 else '?')
    if cur is not None: yield cur, frames
for path in sys.argv[1:]:
    c=collections.Counter(); s=collections.Counter()
    for comm,frames in stacks(path):
        if not comm.startswith('flare-sqlite-wr'): continue
        if not any('event_insert' in f for f in frames): continue
        # frames: leaf first. deepest flare frame:
        fl=next((f for f in frames if 'flare::' in f), '?')
        m=re.search(r'flare::store::sqlite::(\w+)::(\w+)',fl)
        c[(m.group(1)+'::'+m.group(2)) if m else fl[:80]]+=1
        # sqlite frame right under the deepest flare frame (first sqlite3_ api)
        i=frames.index(fl) if fl in frames else 0
        api=[f for f in frames[:i] if f.startswith('sqlite3_')]
        s[(c and (m.group(2) if m else '?'))+' > '+(api[-1][:30] if api else '-')]+=1
    print(path)
    for k,v in c.most_common(12): print('  %5d %s'%(v,k))
    for k,v in s.most_common(12): print('  %5d %s'%(v,k))
