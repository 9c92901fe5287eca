"""Per 10 s of one waiters repetition (database `flare_bench_waiters_*`), the statements that
read `wait_paths` in the event writer's pipeline, as auto_explain sampled them: how many, their
mean duration (ms) and buffers touched. Usage: python3 pgstat.py <server log lines>"""
import collections
import re
import sys

entries, cur = [], []
for line in open(sys.argv[1], errors="replace"):
    if re.match(r"^\d{4}-\d\d-\d\d ", line):
        if cur:
            entries.append("".join(cur))
        cur = [line]
    else:
        cur.append(line)
entries.append("".join(cur))
per = collections.defaultdict(list)
for e in entries:
    m = re.search(r"\d\d:(\d\d:\d)\d\.\d+ UTC \[\d+\] postgres@flare_bench_waiters_\w+ LOG:  duration: ([\d.]+) ms", e)
    if not m or "FROM wait_paths" not in e or "INSERT" in e.split("\n")[1]:
        continue
    top = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", e)
    hit, read = (int(top.group(1)), int(top.group(2) or 0)) if top else (0, 0)
    per[m.group(1)].append((float(m.group(2)), hit, read, "run_waits w" in e))
print("time     n   ms/stmt  hit   read  probes run_waits")
for k, v in sorted(per.items()):
    n = len(v)
    print(f"{k}0 {n:4d} {sum(x[0] for x in v) / n:8.3f} {sum(x[1] for x in v) / n:5.1f} {sum(x[2] for x in v) / n:5.2f}  {all(x[3] for x in v)}")
