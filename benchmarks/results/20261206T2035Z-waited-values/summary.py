"""Medians per build of the alternated rounds (ab-old.jsonl, ab-vs.jsonl), and of any other
waiters-*.jsonl here, per store."""
import glob
import json
import statistics as st

KEYS = ['non_matching_ratio', 'interleaved_non_matching_ratio', 'matching_waiters_cost_ratio',
        'no_waiters_per_s', 'non_matching_per_s', 'interleaved_unwaited_per_s',
        'interleaved_non_matching_per_s', 'matching_per_s', 'matching_few_waiters_per_s',
        'starting_one_run_per_s']

for f in sorted(glob.glob('ab-*.jsonl') + glob.glob('waiters-*.jsonl')):
    by_variant = {}
    for line in open(f):
        d = json.loads(line)
        by_variant.setdefault(d['variant'], []).extend(d['samples'])
    for variant, samples in by_variant.items():
        print(f, variant, len(samples), 'samples')
        for k in KEYS:
            v = [s[k] for s in samples]
            fmt = '%.2f' if 'ratio' in k else '%.0f'
            print('  %-32s median %s  (%s)' % (k, fmt % st.median(v), ' / '.join(fmt % x for x in v)))
