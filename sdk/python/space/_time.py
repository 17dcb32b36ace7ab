from __future__ import annotations

from datetime import datetime
from typing import Optional


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """Parses an RFC 3339 timestamp (Python 3.9's fromisoformat needs help
    with "Z" and nanoseconds)."""
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        s = head + "." + rest[:i][:6].ljust(6, "0") + rest[i:]
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None
