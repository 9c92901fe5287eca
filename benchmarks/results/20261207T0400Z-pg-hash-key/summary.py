"""Prints each repetition of ab.jsonl (PostgreSQL) and the medians per build."""
import json, statistics
keys = ['interleaved_non_matching_ratio', 'interleaved_unwaited_per_s', 'interleaved_non_matching_per_s',
        'no_waiters_per_s', 'non_matching_per_s', 'matching_per_s', 'matching_waiters_cost_ratio',
        'starting_one_run_per_s']
print('build round at', ' '.join(keys))
by = {}
for line in open('ab.jsonl'):
    d = json.loads(line)
    m = d['result']['median']
    by.setdefault(d['build'], []).append(m)
    print(d['build'], d['round'], d['at'], ' '.join(('%.3f' % m[k]) if m[k] < 10 else '%d' % m[k] for k in keys))
for b, ms in by.items():
    print('median', b, len(ms), ' '.join(('%.3f' if k.endswith('ratio') else '%.0f') % statistics.median(m[k] for m in ms) for k in keys))
