#!/usr/bin/env python3
"""Medians and ranges of the waiters' figures in before.jsonl, after.jsonl (SQLite, the builds
before and after) and postgres.jsonl (each line one run; a PostgreSQL run's line holds its SQLite
figure first, then PostgreSQL's)."""
import json
import statistics

KEYS = [
    "no_waiters_per_s",
    "non_matching_per_s",
    "non_matching_ratio",
    "interleaved_non_matching_ratio",
    "matching_first_per_s",
    "matching_few_waiters_per_s",
    "matching_waiters_cost_ratio",
    "matching_per_s",
]


def figures(path):
    out = {}
    dec = json.JSONDecoder()
    for line in open(path):
        line = line.strip()
        while line:
            obj, end = dec.raw_decode(line)
            line = line[end:].strip()
            out.setdefault(obj["settings"]["store"], []).append(obj["median"])
    return out


runs = {}
for path in ("before.jsonl", "after.jsonl", "postgres.jsonl"):
    try:
        for store, samples in figures(path).items():
            runs.setdefault(f"{path.split('.')[0]}, {store}", []).extend(samples)
    except FileNotFoundError:
        pass
for store, samples in runs.items():
    print(f"{store}: {len(samples)} runs")
    for k in KEYS:
        vals = [s[k] for s in samples]
        fmt = (lambda v: f"{v:.3f}") if "ratio" in k else (lambda v: f"{v:,.0f}")
        print(f"  {k:34} median {fmt(statistics.median(vals))}  "
              f"({fmt(min(vals))}–{fmt(max(vals))})  each: {', '.join(fmt(v) for v in vals)}")
    # Every one of the 100,000 waits resumed (the rest not alternated) against every one of
    # the 10,000 beside few waiters: each database's deletions all charged.
    vals = [s["matching_per_s"] / s["matching_few_waiters_per_s"] for s in samples]
    print(f"  {'drain_ratio (computed)':34} median {statistics.median(vals):.3f}  "
          f"({min(vals):.3f}–{max(vals):.3f})  each: {', '.join(f'{v:.3f}' for v in vals)}")
