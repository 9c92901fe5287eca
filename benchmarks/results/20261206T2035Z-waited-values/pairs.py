"""Each repetition of the alternated rounds side by side, and medians: python3 pairs.py ab2 old vs2."""
import json
import statistics as st
import sys

prefix, builds = sys.argv[1], sys.argv[2:]
KEYS = ['non_matching_ratio', 'interleaved_non_matching_ratio', 'matching_waiters_cost_ratio',
        'no_waiters_per_s', 'non_matching_per_s', 'interleaved_unwaited_per_s',
        'interleaved_non_matching_per_s', 'matching_per_s', 'matching_first_per_s',
        'matching_few_waiters_per_s', 'starting_one_run_per_s']
for b in builds:
    samples = [json.loads(line)['samples'][0] for line in open(f'{prefix}-{b}.jsonl')]
    print(b, len(samples), 'repetitions')
    for k in KEYS:
        v = [s[k] for s in samples]
        fmt = '%.2f' if 'ratio' in k else '%.0f'
        print('  %-32s median %7s   %s' % (k, fmt % st.median(v), ' '.join(fmt % x for x in v)))
