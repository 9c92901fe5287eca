import json, sys, glob, statistics as st
keys = ['non_matching_ratio', 'interleaved_non_matching_ratio', 'matching_waiters_cost_ratio',
        'matching_vs_starting_ratio', 'no_waiters_per_s', 'non_matching_per_s',
        'matching_first_per_s', 'matching_few_waiters_per_s', 'starting_one_run_per_s']
for f in sorted(glob.glob('waiters-*.jsonl')):
    for l in open(f):
        d = json.loads(l)
        print(f, d['variant'])
        for k in keys:
            v = [s[k] for s in d['samples']]
            fmt = '%.2f' if 'ratio' in k else '%.0f'
            print('  %-32s median %s  (%s)' % (k, fmt % st.median(v), ' / '.join(fmt % x for x in v)))
