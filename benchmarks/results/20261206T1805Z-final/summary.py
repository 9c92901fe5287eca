import json, glob, statistics as st
fan = {}; drain = {}
for f in sorted(glob.glob('fan-in-*.jsonl')):
    for l in open(f):
        d = json.loads(l)
        store = d['settings']['store']
        if d['scenario'] == 'fan-in':
            fan.setdefault(store, []).extend(d['samples'])
        else:
            drain.setdefault(store, []).extend(d['samples'])
for store in fan:
    r = [s['vs_seeded_drain'] for s in fan[store]]
    print(store, 'fan-in / (seeding + plain drain), %d repetitions: median %.2f (%.2f-%.2f): %s' % (
        len(r), st.median(r), min(r), max(r), ' '.join('%.2f' % x for x in r)))
    print('  children/s median %.0f; seeded drain runs/s median %.0f; plain drain runs/s median %.0f' % (
        st.median(s['children_per_s'] for s in fan[store]),
        st.median(s['seeded_drain_per_s'] for s in drain[store]),
        st.median(s['runs_per_s'] for s in drain[store])))
    print('  MB stored fan-in %.2f, drain %.2f, ratio %.2f' % (
        st.median(s['stored_mb'] for s in fan[store]), st.median(s['stored_mb'] for s in drain[store]),
        st.median(s['vs_drain_stored'] for s in fan[store])))
