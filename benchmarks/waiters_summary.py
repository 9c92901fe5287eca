#!/usr/bin/env python3
"""Medians and ranges of `flare bench waiters --json` figures, for the summaries in
results/*/summary.py. Each file holds one run per line; a run with `--database-url` holds its
SQLite figure first, then PostgreSQL's."""
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
    """The medians of each run in `path`, per store."""
    out = {}
    dec = json.JSONDecoder()
    for line in open(path):
        line = line.strip()
        while line:
            obj, end = dec.raw_decode(line)
            line = line[end:].strip()
            out.setdefault(obj["settings"]["store"], []).append(obj["median"])
    return out


def line(name, vals, fmt):
    print(f"  {name:34} median {fmt(statistics.median(vals))}  "
          f"({fmt(min(vals))}–{fmt(max(vals))})  each: {', '.join(fmt(v) for v in vals)}")


def summary(paths, by_file=False, drain=False):
    """Prints every key's median, range and values per store (and per file if `by_file`);
    with `drain`, the ratio of `matching_per_s` to `matching_few_waiters_per_s` too."""
    runs = {}
    for path in paths:
        try:
            for store, samples in figures(path).items():
                label = f"{path.split('.')[0]}, {store}" if by_file else store
                runs.setdefault(label, []).extend(samples)
        except FileNotFoundError:
            pass
    for label, samples in runs.items():
        print(f"{label}: {len(samples)} runs")
        for k in KEYS:
            fmt = (lambda v: f"{v:.3f}") if "ratio" in k else (lambda v: f"{v:,.0f}")
            line(k, [s[k] for s in samples], fmt)
        if drain:
            # Every one of the waits resumed (the rest not alternated) against every one of the
            # tenth beside few waiters: each database's deletions all charged.
            vals = [s["matching_per_s"] / s["matching_few_waiters_per_s"] for s in samples]
            line("drain_ratio (computed)", vals, lambda v: f"{v:.3f}")
