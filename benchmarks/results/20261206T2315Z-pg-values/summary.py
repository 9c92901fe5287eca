"""Per file of one repetition per line: each repetition's interleaved ratio (non-matching /
unwaited, one database), non-matching / no waiters (two databases) and matching-cost ratio,
and their medians, per store: python3 summary.py > summary.txt"""
import glob
import json
import statistics as st

KEYS = ['interleaved_non_matching_ratio', 'non_matching_ratio', 'matching_waiters_cost_ratio',
        'interleaved_unwaited_per_s', 'interleaved_non_matching_per_s']
for f in sorted(glob.glob('*.jsonl') + glob.glob('*/*.jsonl')):
    by_store = {}
    for line in open(f):
        d = json.loads(line)
        by_store.setdefault(d['variant'].split(',')[0], []).extend(d['samples'])
    for store, samples in sorted(by_store.items()):
        print(f, store, len(samples), 'repetitions')
        for k in KEYS:
            v = [s[k] for s in samples]
            fmt = '%.2f' if 'ratio' in k else '%.0f'
            print('  %-32s median %7s   %s' % (k, fmt % st.median(v), ' '.join(fmt % x for x in v)))
