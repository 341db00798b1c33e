"""The processes this one can see, read from /proc/PID/stat: one reading for the sandbox's memory
watchdog, the reaper's process tree and the confinement supervisor's children."""

from __future__ import annotations

import os
from collections.abc import Iterator


def stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, fields) of every visible process; ``fields`` are those after "pid (comm) ", so
    [0] is the state, [1] the parent pid, [2] the process group and [21] the resident pages. A
    process that exits while it is read is skipped."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            # comm may hold spaces and parentheses: the fields start after its last ')'.
            yield int(entry), stat[stat.rindex(")") + 2 :].split()
        except (OSError, ValueError):
            continue
