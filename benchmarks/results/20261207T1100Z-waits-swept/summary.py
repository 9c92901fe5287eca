#!/usr/bin/env python3
"""Medians and ranges of the waiters' figures in before.jsonl, after.jsonl (SQLite, the builds
before and after) and postgres.jsonl (each line one run; a PostgreSQL run's line holds its SQLite
figure first, then PostgreSQL's), with the drain ratio computed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from waiters_summary import summary  # noqa: E402

summary(("before.jsonl", "after.jsonl", "postgres.jsonl"), by_file=True, drain=True)
