# Pages per table and index of a fan-in's database and of its plain drain's (SQLite's dbstat),
# read from the two databases of one `flare bench fan-in --children 10000 --reps 1` repetition
# kept for it (a build that did not delete its temp directories: not committed).
import sqlite3, sys
dbs = dict(zip(['fan-in', 'drain'], sys.argv[1:3]))
pages = {}
for name, path in dbs.items():
    c = sqlite3.connect(path)
    pages[name] = dict(c.execute("SELECT name, count(*) FROM dbstat GROUP BY name"))
names = sorted(set(pages['fan-in']) | set(pages['drain']), key=lambda n: -pages['fan-in'].get(n, 0))
print('%-28s %7s %7s' % ('table or index', 'fan-in', 'drain'))
for n in names:
    f, d = pages['fan-in'].get(n, 0), pages['drain'].get(n, 0)
    if f > 1 or d > 1:
        print('%-28s %7d %7d' % (n, f, d))
print('%-28s %7d %7d' % ('all (4 KiB pages)', sum(pages['fan-in'].values()), sum(pages['drain'].values())))
