"""Summarizes ab.sh's output: per variant the medians (min-max) of every repetition, the paired
ratio final/base of each round's median children per second, the tail (the last child's body to
every run counted succeeded: secs - last_child_secs), the plain drains beside them."""
import glob, json, statistics

def lines(pattern):
    for f in sorted(glob.glob(pattern)):
        for line in open(f):
            yield json.loads(line)

def samples(pattern, scenario, store):
    out = []
    for d in lines(pattern):
        if d["scenario"] == scenario and d["settings"]["store"] == store:
            for s in d["samples"]:
                if "last_child_secs" in s:
                    s = dict(s, tail_secs=s["secs"] - s["last_child_secs"])
                out.append(s)
    return out

def show(xs, key, fmt):
    v = [s[key] for s in xs]
    return f"{key} {fmt % statistics.median(v)} ({fmt % min(v)}-{fmt % max(v)})"

def paired(prefix, scenario, store, key, rounds):
    ratios = []
    for r in range(1, rounds + 1):
        m = {v: statistics.median(s[key] for s in samples(f"{prefix}-{v}-{r}.jsonl", scenario, store)) for v in ["base", "final"]}
        ratios.append(m["final"] / m["base"])
    return "median %.2f (%.2f-%.2f)" % (statistics.median(ratios), min(ratios), max(ratios))

for store, prefix, rounds in [("sqlite", "sqlite", 8), ("postgres", "pg", 2)]:
    for v in ["base", "final"]:
        xs = samples(f"{prefix}-{v}-*.jsonl", "fan-in", store)
        print(store, v, f"n={len(xs)}", show(xs, "children_per_s", "%.0f"), show(xs, "vs_seeded_drain", "%.2f"),
              show(xs, "vs_drain", "%.2f"), show(xs, "first_child_secs", "%.3f"), show(xs, "fan_in_secs", "%.3f"),
              show(xs, "tail_secs", "%.3f"))
        ds = samples(f"{prefix}-{v}-*.jsonl", "fan-in drain", store)
        print(store, v, "beside it, the plain drain of 10,000:", show(ds, "runs_per_s", "%.0f"), show(ds, "seeded_drain_per_s", "%.0f"))
    print(store, "children/s paired final/base per round:", paired(prefix, "fan-in", store, "children_per_s", rounds))

for v in ["base", "final"]:
    xs = samples(f"drain-{v}-*.jsonl", "drain", "sqlite")
    print("drain 50,000 sqlite", v, f"n={len(xs)}", show(xs, "runs_per_s", "%.0f"))
print("drain 50,000 sqlite paired final/base per round:", paired("drain", "drain", "sqlite", "runs_per_s", 3))
