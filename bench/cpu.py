"""CPU seconds per GiB moved, per process: what the benches report beside wall-clock ratios.

On a small shared machine the S3 server, Spark's JVM and the clients take CPU from the same
cores as the engine, so a wall-clock ratio measures the neighbours too; the CPU a process
spends per byte it moves does not depend on them. Every figure here is user + system time
of every thread of a process, from /proc/<pid>/stat (for this process: getrusage), and a
process tree's figure adds the children it has already reaped (cutime + cstime), so a
Python worker that exited during a scan still counts.
"""

from __future__ import annotations

import os
import resource
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

GiB = 1 << 30
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from the 3rd (state) on


def process_cpu(pid: int, reaped: bool = False) -> float:
    """User + system CPU seconds of every thread of a process so far; `reaped`: with those
    of the children it has waited for (a forked worker that exited is in cutime)."""
    fields = _stat(pid)
    return sum(int(f) for f in fields[11:15 if reaped else 13]) / _TICK


def self_cpu() -> float:
    """User + system CPU seconds of every thread of this process so far."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each kind of thread of this process: Python threads by name
    (a trailing number or `_N` dropped, so a pool's workers count as one), the others
    (obstore's Rust runtime, ...) by their kernel name. From each thread's schedstat, in
    nanoseconds: /proc's per-thread clock ticks round each thread down, which over many
    short-lived workers loses whole ticks. Threads that ended are not in it, so take it
    around work whose threads outlive it."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # ended meanwhile
        name = names.get(int(tid), comm)
        kind = name.rstrip("0123456789").rstrip("_-") or name
        out[kind] = out.get(kind, 0.0) + ns / 1e9
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    """Every live process below `root` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children.setdefault(int(_stat(int(name))[1]), []).append(int(name))
            except (OSError, IndexError):
                continue  # gone meanwhile
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_cpu(root: int, match: Callable[[str], bool]) -> float:
    """CPU seconds of the live processes below `root` whose command line `match`es, each
    with the children it reaped (a forked worker that exited is in its parent's cutime)."""
    total = 0.0
    for pid in descendants(root):
        if match(cmdline(pid)):
            try:
                total += process_cpu(pid, reaped=True)
            except OSError:
                continue  # gone meanwhile
    return total


@dataclass
class CpuPerGiB:
    """Rounds of (CPU seconds of the process under test, CPU seconds of the baseline's
    process, bytes each moved): medians, spreads and the ratio of engine to baseline."""

    rounds: list[tuple[float, float, int, int]] = field(default_factory=list)

    def add(self, ours: float, theirs: float, our_bytes: int, their_bytes: int | None = None
            ) -> None:
        self.rounds.append((ours, theirs, our_bytes,
                            our_bytes if their_bytes is None else their_bytes))

    def ours(self) -> list[float]:
        return [c * GiB / n for c, _, n, _ in self.rounds]

    def theirs(self) -> list[float]:
        return [c * GiB / n for _, c, _, n in self.rounds]

    def ratio(self) -> float:
        """Median of the engine's s/GiB over the median of the baseline's."""
        return statistics.median(self.ours()) / statistics.median(self.theirs())

    def line(self, ours: str, theirs: str, target: float | None = None) -> str:
        """One line: each side's median s/GiB (range), the ratio and the verdict."""
        verdict = "" if target is None else \
            f" (target <= {target:g}x: {'met' if self.ratio() <= target else 'MISSED'})"
        return (f"{ours} {spread(self.ours())} CPU s/GiB vs {theirs} "
                f"{spread(self.theirs())}: {self.ratio():.2f}x{verdict}")


def spread(values: list[float]) -> str:
    """'median (min-max)'."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
