import json, statistics as st
by = {}
for l in open('waiters.txt'):
    b, j = l.split(' ', 1)
    s = json.loads(j)['samples'][0]
    by.setdefault(b, []).append(s)
for b, ss in by.items():
    for k in ['matching_waiters_cost_ratio', 'matching_first_per_s', 'matching_few_waiters_per_s',
              'matching_per_s', 'non_matching_ratio', 'interleaved_non_matching_ratio']:
        v = [s[k] for s in ss]
        fmt = '%.2f' if 'ratio' in k else '%.0f'
        print('%-8s %-32s median %s (%s)' % (b, k, fmt % st.median(v), ' / '.join(fmt % x for x in v)))
