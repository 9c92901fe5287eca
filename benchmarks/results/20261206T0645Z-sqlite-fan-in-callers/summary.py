"""Summarizes ab.sh's output: per variant the medians (min-max) of every repetition, and the
paired ratio final/base of each round's median children per second."""
import glob, json, statistics

def samples(pattern, store):
    out = []
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            d = json.loads(line)
            if d["scenario"] == "fan-in" and d["settings"]["store"] == store:
                out += d["samples"]
    return out

def show(xs, key, fmt):
    v = [s[key] for s in xs]
    return f"{key} {fmt % statistics.median(v)} ({fmt % min(v)}-{fmt % max(v)})"

for store, prefix, rounds in [("sqlite", "sqlite", 10), ("postgres", "pg", 2)]:
    for v in ["base", "final"]:
        xs = samples(f"{prefix}-{v}-*.jsonl", store)
        print(store, v, f"n={len(xs)}", show(xs, "children_per_s", "%.0f"), show(xs, "vs_seeded_drain", "%.2f"),
              show(xs, "vs_drain", "%.2f"), *( [show(xs, "fan_in_secs", "%.3f")] if "fan_in_secs" in xs[0] else []))
    ratios = []
    for r in range(1, rounds + 1):
        m = {v: statistics.median(s["children_per_s"] for s in samples(f"{prefix}-{v}-{r}.jsonl", store)) for v in ["base", "final"]}
        ratios.append(m["final"] / m["base"])
    print(store, "paired final/base per round: median %.2f (%.2f-%.2f)" % (statistics.median(ratios), min(ratios), max(ratios)))
