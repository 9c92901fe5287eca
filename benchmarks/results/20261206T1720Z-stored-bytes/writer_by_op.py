import sys, re, collections, subprocess
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
def op_of(frames):
    seen=False
    for f in reversed(frames):
        if 'run_batch' in f: seen=True; continue
        if seen and 'flare::' in f and 'writer::' not in f and 'TypedOp' not in f:
            return f
    return '(none)'
def short(op):
    m=re.search(r'flare::store::sqlite::(\w+)::(?:<impl [^>]*>::)?(\w+)',op)
    return (m.group(1)+'::'+m.group(2)) if m else op[:90]
res={}
for path in sys.argv[1:]:
    c=collections.Counter(); tot=0
    for comm,frames in stacks(path):
        if not comm.startswith('flare-sqlite-wr'): continue
        tot+=1
        c[short(op_of(frames))]+=1
    res[path]=(tot,c)
    print(path,'writer samples',tot)
    for k,v in c.most_common(25): print('  %6d %s'%(v,k))

def none_detail(path):
    c=collections.Counter()
    for comm,frames in stacks(path):
        if not comm.startswith('flare-sqlite-wr'): continue
        if op_of(frames)!='(none)': continue
        # frames from root: find first after writer_loop
        fr=list(reversed(frames))
        key=[]
        after=False
        for f in fr:
            if 'writer_loop' in f or 'run_batch' in f: after=True; key=[f[:60]]; continue
            if after: key.append(f[:60])
            if len(key)>=4: break
        c[' <- '.join(key)]+=1
    return c
import os
if os.environ.get('NONE'):
    for p in sys.argv[1:]:
        print(p)
        for k,v in none_detail(p).most_common(15): print('  %5d %s'%(v,k))

def commit_detail(path, depth=int(os.environ.get('DEPTH','8'))):
    c=collections.Counter()
    for comm,frames in stacks(path):
        if not comm.startswith('flare-sqlite-wr'): continue
        fr=list(reversed(frames))
        i=next((j for j,f in enumerate(fr) if 'run_batch' in f),None)
        if i is None or i+1>=len(fr) or 'execute_batch' not in ' '.join(fr[i+1:i+4]): continue
        sq=[f for f in fr[i+1:] if f.startswith('sqlite3') or f.startswith('pager') or f.startswith('wal') or f.startswith('sys')]
        c[' > '.join(x[:28] for x in sq[:depth])]+=1
    return c
if os.environ.get('COMMIT'):
    for p in sys.argv[1:]:
        print(p)
        for k,v in commit_detail(p).most_common(14): print('  %5d %s'%(v,k))
