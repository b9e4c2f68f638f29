"""Byte-rate quotas of the remote tier (KIP-956's RLMQuotaManager) and throttle-time sensors.

A quota is a rate over `window_num` samples of `window_size_seconds` each (Kafka's `Rate`
over a `SampledStat`): the bytes recorded in the live samples divided by the window span,
where the span counts at least `window_num - 1` whole windows so a burst right after start
is not measured over a few milliseconds. When the rate is above the quota, the throttle
time is Kafka's `(rate - quota) / quota * window span`.

- Copy: a copier waits (at most 1 s at a time, re-checking) while the copy quota is
  exceeded, then records the segment's bytes (`RLMCopyQuota.wait_and_record`).
- Fetch: when the fetch quota is exceeded, the remote read is not started and the caller
  gets empty records with the throttle time (Kafka returns empty records then, too).

Thread-safe. `clock` gives now in ms; when it also has `sleep(ms)` (a test clock), waits
advance it instead of blocking.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import BrokerConfig

__all__ = ["CopyQuotaWaiter", "RLMQuota", "RLMQuotas", "ThrottleTimeSensor"]


class RLMQuota:
    """A windowed byte rate checked against `quota_bytes_per_second`."""

    def __init__(self, quota_bytes_per_second: int, window_num: int,
                 window_size_seconds: int, clock: Callable[[], int]):
        if quota_bytes_per_second < 1 or window_num < 1 or window_size_seconds < 1:
            raise ValueError("quota, window num and window size must be >= 1")
        self.quota = int(quota_bytes_per_second)
        self.window_num = int(window_num)
        self.window_ms = int(window_size_seconds) * 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: deque[list[int]] = deque()  # [window start ms, bytes]

    def _purge(self, now: int) -> None:
        while self._samples and self._samples[0][0] + self.window_ms * self.window_num <= now:
            self._samples.popleft()

    def record(self, nbytes: int) -> None:
        with self._lock:
            now = self._clock()
            self._purge(now)
            if not self._samples or now >= self._samples[-1][0] + self.window_ms:
                self._samples.append([now, 0])
                while len(self._samples) > self.window_num:
                    self._samples.popleft()
            self._samples[-1][1] += int(nbytes)

    def _span_ms(self, now: int) -> int:
        elapsed = now - self._samples[0][0] if self._samples else 0
        full = elapsed // self.window_ms
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def rate(self) -> float:
        """Bytes per second over the live samples."""
        with self._lock:
            now = self._clock()
            self._purge(now)
            total = sum(s[1] for s in self._samples)
            return total * 1000.0 / self._span_ms(now)

    def throttle_time_ms(self) -> int:
        """0 when within the quota, else how long the rate needs to fall back to it."""
        with self._lock:
            now = self._clock()
            self._purge(now)
            total = sum(s[1] for s in self._samples)
            span = self._span_ms(now)
            rate = total * 1000.0 / span
            if rate <= self.quota:
                return 0
            return max(1, round((rate - self.quota) / self.quota * span))


class ThrottleTimeSensor:
    """avg and max of the throttle times recorded in the last `window_ms` (Kafka's
    `remote-copy-throttle-time-avg/-max` sensors use 2 windows of 30 s by default)."""

    def __init__(self, clock: Callable[[], int], window_ms: int = 60_000):
        self._clock = clock
        self._window_ms = window_ms
        self._values: deque[tuple[int, int]] = deque()
        self._lock = threading.Lock()

    def record(self, throttle_ms: int) -> None:
        with self._lock:
            self._values.append((self._clock(), int(throttle_ms)))

    def _live(self) -> list[int]:
        now = self._clock()
        while self._values and self._values[0][0] + self._window_ms <= now:
            self._values.popleft()
        return [v for _, v in self._values]

    def avg(self) -> float:
        with self._lock:
            live = self._live()
            return sum(live) / len(live) if live else 0.0

    def max(self) -> float:
        with self._lock:
            live = self._live()
            return float(max(live)) if live else 0.0


class CopyQuotaWaiter:
    """Kafka's copy-quota gate: copiers take a fair lock, wait while the quota is exceeded
    (re-checking at least every second, recording each throttle time), then record the
    segment's bytes and wake the other waiters."""

    MAX_WAIT_MS = 1000

    def __init__(self, quota: RLMQuota, sensor: ThrottleTimeSensor, clock: Callable[[], int],
                 closed: Callable[[], bool]):
        self._quota = quota
        self._sensor = sensor
        self._clock = clock
        self._closed = closed
        self._cond = threading.Condition()

    def wait_and_record(self, nbytes: int) -> int:
        """Blocks while the copy quota is exceeded; returns the ms waited (by the clock)."""
        waited = 0
        with self._cond:
            while not self._closed():
                throttle = self._quota.throttle_time_ms()
                if throttle <= 0:
                    break
                self._sensor.record(throttle)
                pause = min(throttle, self.MAX_WAIT_MS)
                start = self._clock()
                sleep = getattr(self._clock, "sleep", None)
                if sleep is not None:
                    sleep(pause)
                else:
                    self._cond.wait(pause / 1000.0)
                waited += self._clock() - start
            self._quota.record(nbytes)
            self._cond.notify_all()
        return waited


class RLMQuotas:
    """The copy and fetch quotas of one RemoteLogManager (Kafka's two RLMQuotaManagers),
    with their throttle-time sensors.

    Args:
        config: the broker's configuration (`remote.log.manager.{copy,fetch}.*` keys).
        clock: now in ms (with `sleep(ms)`, it also drives the copy quota's waits).
        closed: whether the manager was closed (a waiting copier stops waiting).
    """

    def __init__(self, config: BrokerConfig, clock: Callable[[], int], closed: Callable[[], bool]):
        self.copy_sensor = ThrottleTimeSensor(clock)
        self.fetch_sensor = ThrottleTimeSensor(clock)
        self.copy_rate, self.fetch_rate = (
            RLMQuota(config[f"remote.log.manager.{kind}.max.bytes.per.second"],
                     config[f"remote.log.manager.{kind}.quota.window.num"],
                     config[f"remote.log.manager.{kind}.quota.window.size.seconds"], clock)
            for kind in ("copy", "fetch"))
        #: what a copier waits on before each segment
        self.copy = CopyQuotaWaiter(self.copy_rate, self.copy_sensor, clock, closed)
