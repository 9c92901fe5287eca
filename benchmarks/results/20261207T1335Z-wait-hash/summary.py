#!/usr/bin/env python3
"""Medians and ranges of the waiters' figures in before.jsonl and after.jsonl (SQLite, the builds
before and after `0056_wait_match_hash.sql`, alternated) and postgres.jsonl (the new build; each
line holds a run's SQLite figure, then PostgreSQL's), with the drain ratio computed; then the same
of first-build/, the first build of the change, whose event lookup SQLite prepared again at every
call."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from waiters_summary import summary  # noqa: E402

os.chdir(os.path.dirname(os.path.abspath(__file__)))
summary(("before.jsonl", "after.jsonl", "postgres.jsonl"), by_file=True, drain=True)
summary(("first-build/before.jsonl", "first-build/after.jsonl"), by_file=True, drain=True)
