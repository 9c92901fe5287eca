"""Durations as the protocol and Flare's API take them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Union

Duration = Union[int, float, str, timedelta]
"""Milliseconds, a ``timedelta``, or text such as ``"90s"``, ``"15m"``, ``"2h"``, ``"3d"``, ``"1h30m"``."""

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")


def to_ms(d: Duration) -> int:
    """Milliseconds of ``d``."""
    if isinstance(d, timedelta):
        return round(d.total_seconds() * 1000)
    if isinstance(d, (int, float)):
        if d < 0:
            raise ValueError(f"invalid duration {d}: use a number of ms >= 0")
        return round(d)
    text, pos, total = d.strip(), 0, 0.0
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ValueError(f'invalid duration {d!r}: use e.g. "90s", "15m", "2h", "3d", "1h30m"')
    return round(total)
