#!/usr/bin/env python3
"""Medians and paired ratios of the waiters runs in arms.txt and ab2.txt (base vs auto4000)."""
import re, statistics as st
runs = {}
order = []
for f in ("arms.txt", "ab2.txt"):
    label = None
    for line in open(f):
        m = re.match(r"== (?:waiters )?(base|auto4000|mmap) (\d)$", line.strip())
        if m:
            label = (f, m.group(1), m.group(2))
            continue
        if label and line.startswith("matching_waiters_cost_ratio"):
            runs[label] = {k: float(v) for k, v in (kv.split("=") for kv in line.split())}
            order.append(label)
            label = None
keys = ["matching_waiters_cost_ratio", "matching_first_per_s", "matching_few_waiters_per_s",
        "matching_per_s", "non_matching_per_s", "starting_one_run_per_s", "no_waiters_per_s"]
for arm in ("base", "auto4000", "mmap"):
    rs = [runs[l] for l in order if l[1] == arm]
    print(f"{arm} ({len(rs)} runs)")
    for k in keys:
        vals = [r[k] for r in rs]
        print(f"  {k}: median {st.median(vals):.3f}  ({', '.join(f'{v:.3f}' for v in vals)})")
pairs = [(runs[(f, 'base', r)], runs[(f, 'auto4000', r)]) for (f, a, r) in order if a == 'base' and (f, 'auto4000', r) in runs]
print(f"auto4000 / base, paired by round ({len(pairs)} pairs)")
for k in keys[1:]:
    q = [b[k] / a[k] for a, b in pairs]
    print(f"  {k}: median {st.median(q):.2f}  ({', '.join(f'{v:.2f}' for v in q)})")

# The paired figures from each run's full JSON (json/: a-* from arms.sh, b-* from ab2.sh).
import json, os
here = os.path.dirname(os.path.abspath(__file__))
jpairs = [("a-base-1", "a-auto4000-1"), ("a-base-2", "a-auto4000-2")] + [
    (f"b-base-{r}", f"b-auto4000-{r}") for r in range(1, 9)]  # ab2.sh: 1-3, ab4.sh: 4-8
print(f"auto4000 / base, paired, from json/ ({len(jpairs)} pairs)")
for k in ["matching_waiters_cost_ratio", "interleaved_unwaited_per_s", "interleaved_non_matching_per_s", "non_matching_per_s",
          "no_waiters_per_s", "starting_one_run_per_s", "matching_per_s"]:
    q = []
    for b, a in jpairs:
        B = json.load(open(os.path.join(here, "json", b + ".json")))["samples"][0][k]
        A = json.load(open(os.path.join(here, "json", a + ".json")))["samples"][0][k]
        q.append(A / B)
    print(f"  {k}: median {st.median(q):.2f}  ({', '.join(f'{v:.2f}' for v in q)})")
