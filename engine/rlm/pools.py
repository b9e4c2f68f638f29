"""Bounded thread pools and the task scheduler of the RemoteLogManager (Kafka's
RLMCopyThreadPool, RLMExpirationThreadPool and RemoteLogReader pool).

- `RemoteLogReaderPool`: `remote.log.reader.threads` threads behind a queue bounded by
  `remote.log.reader.max.pending.tasks`; a read submitted while the queue is full is refused
  at once with `RemoteLogReaderRejectedError` (Kafka's RejectedExecutionException), so a
  burst of remote reads cannot grow memory without bound.
- `TaskScheduler`: runs each registered task on its pool with a fixed delay between the end
  of one run and the start of the next (Kafka's scheduleWithFixedDelay), first run at once.
  A task never runs twice at the same time; a task that hangs holds one thread of its pool
  and delays only itself.
- `ExponentialBackoff`: Kafka's `ExponentialBackoff` (multiplier 2, jitter) for retries of
  a failed task run.
- `BusyTracker`: busy time of a pool's threads, for the `...AvgIdlePercent` gauges.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from engine.errors import RemoteLogReaderRejectedError

__all__ = ["BusyTracker", "ExponentialBackoff", "RemoteLogReaderPool", "TaskScheduler",
           "WorkerPool"]

log = logging.getLogger(__name__)


class ExponentialBackoff:
    """Kafka's ExponentialBackoff: `initial * multiplier^min(attempts, exp_max)` times a
    random factor in [1 - jitter, 1 + jitter), capped at `max_ms`."""

    def __init__(self, initial_ms: int, max_ms: int, jitter: float, multiplier: float = 2.0,
                 rng: random.Random | None = None):
        self.initial_ms = int(initial_ms)
        self.max_ms = int(max_ms)
        self.jitter = float(jitter)
        self.multiplier = float(multiplier)
        self._rng = rng or random.Random()
        self._exp_max = (math.log(self.max_ms / max(self.initial_ms, 1)) / math.log(multiplier)
                         if self.max_ms > self.initial_ms else 0.0)

    def backoff(self, attempts: int) -> int:
        """Delay in ms before retry number `attempts + 1` (attempts counts from 0)."""
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * self.multiplier ** min(attempts, self._exp_max)
        factor = (1.0 if self.jitter < 2.2250738585072014e-308
                  else self._rng.uniform(1 - self.jitter, 1 + self.jitter))
        return min(int(factor * term), self.max_ms)


class BusyTracker:
    """Busy time of `threads` workers; `idle_percent()` covers the time since the previous
    call (the whole life for the first), counting runs still in progress."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self._lock = threading.Lock()
        self._busy_ns = 0
        self._running: dict[int, int] = {}  # thread id -> start ns
        self._mark = time.monotonic_ns()

    def start(self) -> None:
        with self._lock:
            self._running[threading.get_ident()] = time.monotonic_ns()

    def stop(self) -> None:
        with self._lock:
            start = self._running.pop(threading.get_ident(), None)
            if start is not None:
                self._busy_ns += time.monotonic_ns() - max(start, self._mark)

    def idle_percent(self) -> float:
        with self._lock:
            now = time.monotonic_ns()
            busy = self._busy_ns + sum(now - max(s, self._mark) for s in self._running.values())
            span = max(now - self._mark, 1) * self.threads
            self._busy_ns = 0
            self._mark = now
            return max(0.0, min(100.0, 100.0 * (1.0 - busy / span)))


class WorkerPool:
    """`threads` daemon workers over a queue of at most `max_pending` waiting tasks (0: no
    bound). Daemon threads: a task stuck in a plugin call never blocks interpreter exit."""

    def __init__(self, threads: int, max_pending: int = 0, name: str = "rlm-worker"):
        self.threads = int(threads)
        self.max_pending = int(max_pending)
        self.name = name
        self.busy = BusyTracker(threads)
        self._queue: queue.Queue = queue.Queue(maxsize=self.max_pending)
        self._closed = False
        self._live_lock = threading.Lock()
        self._live = self.threads
        self._workers = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(self.threads)]
        for worker in self._workers:
            worker.start()

    def _rejected(self) -> Exception:
        return RuntimeError(f"{self.name} pool: {self.max_pending} tasks already wait")

    def submit(self, fn: Callable, *args) -> Future:
        """Queues `fn(*args)`; raises the pool's rejection error when the queue is full or
        the pool is closed."""
        if self._closed:
            raise RuntimeError(f"the {self.name} pool is closed")
        future: Future = Future()
        try:
            self._queue.put_nowait((future, fn, args))
        except queue.Full:
            raise self._rejected() from None
        return future

    def queue_size(self) -> int:
        """Tasks waiting for a thread."""
        return self._queue.qsize()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                # one stop sentinel fits any queue bound: each worker passes it on
                with self._live_lock:
                    self._live -= 1
                    last = self._live == 0
                if not last:
                    self._queue.put(None)
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            self.busy.start()
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
            finally:
                self.busy.stop()

    def close(self) -> None:
        """Cancels the waiting tasks and stops the workers once their current task ends (a
        worker stuck in a plugin call stays until the call returns)."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        try:
            self._queue.put_nowait(None)
        except queue.Full:  # a submit raced with close: wait for a free slot elsewhere
            threading.Thread(target=self._queue.put, args=(None,), daemon=True,
                             name=f"{self.name}-stop").start()


class RemoteLogReaderPool(WorkerPool):
    """The `remote-log-reader` pool: a full queue refuses a read with
    RemoteLogReaderRejectedError (Kafka's RejectedExecutionException)."""

    def __init__(self, threads: int, max_pending: int):
        super().__init__(threads, max_pending, "remote-log-reader")

    def _rejected(self) -> Exception:
        return RemoteLogReaderRejectedError(
            f"remote read refused: {self.max_pending} reads already wait for one of the "
            f"{self.threads} remote-log-reader threads (remote.log.reader.max.pending.tasks)")

    def submit(self, fn: Callable, *args) -> Future:
        if self._closed:
            raise RemoteLogReaderRejectedError("the remote log reader pool is closed")
        return super().submit(fn, *args)


class _Scheduled:
    __slots__ = ("cancelled", "name", "pool", "run", "running")

    def __init__(self, name, run, pool):
        self.name, self.run, self.pool = name, run, pool
        self.cancelled = False
        self.running = False


class TaskScheduler:
    """Runs tasks on their pools with a fixed delay after each run. `run()` of a task returns
    the delay in ms before its next run."""

    def __init__(self, name: str = "kafka-rlm-scheduler"):
        self._heap: list = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._tasks: dict[str, _Scheduled] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def schedule(self, name: str, run: Callable[[], int], pool: WorkerPool) -> None:
        """Registers `run` under `name` (replacing a task of that name), first run now."""
        with self._cond:
            old = self._tasks.get(name)
            if old is not None:
                old.cancelled = True
            task = _Scheduled(name, run, pool)
            self._tasks[name] = task
            heapq.heappush(self._heap, (time.monotonic(), next(self._seq), task))
            self._cond.notify()

    def cancel(self, name: str) -> None:
        with self._cond:
            task = self._tasks.pop(name, None)
            if task is not None:
                task.cancelled = True

    def names(self) -> list[str]:
        with self._cond:
            return sorted(self._tasks)

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, task = self._heap[0]
                delay = due - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                if task.cancelled:
                    continue
                task.running = True
                try:
                    task.pool.submit(self._run, task)
                except RuntimeError:  # pool closed
                    task.running = False

    def _run(self, task: _Scheduled) -> None:
        delay_ms = None
        try:
            delay_ms = task.run()
        except Exception:  # a task's own errors are handled inside; this is a bug guard
            log.exception("Remote log task %s failed", task.name)
        finally:
            with self._cond:
                task.running = False
                if not task.cancelled and not self._closed:
                    wait = max(0, delay_ms if delay_ms is not None else 1000) / 1000.0
                    heapq.heappush(self._heap,
                                   (time.monotonic() + wait, next(self._seq), task))
                    self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for task in self._tasks.values():
                task.cancelled = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
