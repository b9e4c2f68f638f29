"""Connection counts of `serve`, as Kafka's ConnectionQuotas keeps them: at most
`max.connections` connections at once, and at most `max.connections.per.ip` from one
address. A connection beyond either limit is closed at accept (Kafka closes it before
reading anything); a slot freed by a closed connection is taken by the next one.

Thread-safety: used from the event loop only.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["ConnectionQuotas"]


class ConnectionQuotas:
    """Counts the open connections, in total and per peer address."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self._per_ip: Counter[str] = Counter()

    def acquire(self, ip: str | None) -> str | None:
        """Takes a slot for a connection from `ip`: None when taken, else why not (the
        config key whose limit is reached)."""
        if self.total >= self.max_connections:
            return f"max.connections ({self.max_connections}) reached"
        if ip is not None and self._per_ip[ip] >= self.max_per_ip:
            return f"max.connections.per.ip ({self.max_per_ip}) reached for {ip}"
        self.total += 1
        if ip is not None:
            self._per_ip[ip] += 1
        return None

    def release(self, ip: str | None) -> None:
        """Frees the slot of a connection `acquire` admitted."""
        self.total -= 1
        if ip is not None:
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]
