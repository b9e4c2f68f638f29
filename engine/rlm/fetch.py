"""How the RemoteLogManager answers a read (Kafka's ReplicaManager.readFromLog deciding
between the local log and RemoteLogManager.asyncRead, and its RemoteLogReader).

The RemoteLogManager builds one `RemoteLogReader` with the collaborators it names (RLMM,
RSM, index cache, next positions, metrics, fetch quota, reader pool, the partitions' logs
and states); its `read`, `read_many` and `list_offsets` answer for the manager's.

`plan_read` decides, for one partition, how a read is answered and returns a `ReadPlan`:
an `answer` already (a local read; a remote read the fetch quota throttles), or a remote read
to run. `read_remote` runs it with the remote-fetch metrics and quota. `read` and
`read_many` first try each remote read inline with `nonblocking=True`, which returns None
instead of doing storage I/O (the plan then goes to the reader pool, `submit_read`), and
wait on the pool with `await_result`, bounded by `remote.fetch.max.wait.ms`. On a tier of
local files, `read_many` hands the reads that need storage I/O to the pool as one task
(`read_group`, `await_group`).

The remote-segment access layer signals "this would need storage I/O" with its `WouldBlock`
exception, raised deep inside an index or range read; it ends here, so that callers see a
plain result (an answer or None).
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from engine.errors import OffsetOutOfRangeError, RemoteFetchTimeoutError
from engine.rlm import copier, offsets, reader
from engine.rlm.reader import RemoteFetchResult
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.log.unified_log import UnifiedLog
    from engine.remote.index_cache import RemoteIndexCache
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.remote.segment_access import NextPositions
    from engine.remote.storage import RemoteStorageManager
    from engine.rlm.metrics import RLMMetrics
    from engine.rlm.pools import RemoteLogReaderPool
    from engine.rlm.quota import RLMQuota, ThrottleTimeSensor

__all__ = ["ISOLATION_LEVELS", "ReadPlan", "RemoteLogReader", "await_result",
           "check_read_args", "plan_read", "read_remote", "submit", "submit_read"]

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class ReadPlan(NamedTuple):
    """How one partition's read is answered: `answer` when nothing remote is left to do (a
    local read, or a remote read throttled by the fetch quota), else a remote read of
    `state` with the read's arguments. (A tuple: every read makes one.)"""

    offset: int
    max_bytes: int
    min_one_message: bool
    isolation: str
    answer: RemoteFetchResult | None = None
    state: PartitionState | None = None


def check_read_args(max_bytes: int, isolation: str) -> None:
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, got {isolation!r}")


def plan_read(log_reader, unified, st: PartitionState | None, topic: str, partition: int,
              offset: int, max_bytes: int, min_one_message: bool, isolation: str) -> ReadPlan:
    """The plan of a read of `unified` (and `st`, its RLM state when tiered) at `offset`.

    Raises:
        OffsetOutOfRangeError: `offset` outside [log start offset, log end offset].
        RemoteLogMetadataGapError: `offset` is below the local log start and the remote log
            metadata does not cover it.
    """
    start, end = unified.log_start_offset, unified.log_end_offset
    if offset < start or offset > end:
        raise OffsetOutOfRangeError(
            f"fetch offset {offset} of partition {topic}-{partition} is out of range: "
            f"valid offsets are [{start}, {end}] (log start offset, log end offset)",
            offset=offset, log_start_offset=start, log_end_offset=end)
    local_start = unified.local_log_start_offset
    if st is not None and st.copy.metadata_gap is not None and offset < local_start:
        raise copier.gap_error(st, offset)
    if offset >= local_start or st is None:
        try:
            return ReadPlan(offset, max_bytes, min_one_message, isolation,
                            answer=reader.read_local(unified, topic, partition, offset,
                                                     max_bytes, min_one_message, isolation))
        except OffsetOutOfRangeError:
            if st is None or offset < unified.log_start_offset:
                raise  # else local retention just removed it: read it remotely
    throttle = log_reader.throttle_time_ms()
    if throttle > 0:
        log_reader.fetch_quota_sensor.record(throttle)
        return ReadPlan(offset, max_bytes, min_one_message, isolation,
                        answer=RemoteFetchResult(topic, int(partition), offset, b"", offset,
                                                 True, throttle_time_ms=throttle))
    return ReadPlan(offset, max_bytes, min_one_message, isolation, state=st)


def read_remote(log_reader, plan: ReadPlan,
                nonblocking: bool = False) -> RemoteFetchResult | None:
    """Runs the remote read of `plan`, counting it in the remote-fetch metrics and the fetch
    quota. With `nonblocking`, None when it would need storage I/O (nothing is counted)."""
    st, offset = plan.state, plan.offset
    started = time.perf_counter()
    try:
        data, next_offset, aborted = reader.read_remote(log_reader, st, offset, plan.max_bytes,
                                                        plan.min_one_message, plan.isolation,
                                                        nonblocking)
    except reader.WouldBlock:
        return None
    except Exception as exc:
        log_reader.metrics.mark("RemoteFetchErrorsPerSec", st.topic)
        st.last_fetch_error = f"{type(exc).__name__}: {exc}"
        raise
    log_reader.metrics.mark("RemoteFetchRequestsPerSec", st.topic)
    nbytes = memoryview(data).nbytes
    log_reader.metrics.mark("RemoteFetchBytesPerSec", st.topic, nbytes)
    log_reader.metrics.fetch_time.observe((time.perf_counter() - started) * 1000)
    log_reader.record_fetched(nbytes)
    return RemoteFetchResult(st.topic, st.partition, offset, data, next_offset, True,
                             aborted)


def submit(log_reader, topic: str, work) -> concurrent.futures.Future:
    """`work` on the reader pool, counted as a failed fetch of `topic` when the pool refuses
    it (RemoteLogReaderRejectedError: its queue is full)."""
    try:
        return log_reader.reader_pool.submit(work)
    except Exception:
        log_reader.metrics.mark("RemoteFetchErrorsPerSec", topic)
        raise


def submit_read(log_reader, plan: ReadPlan) -> concurrent.futures.Future:
    """The remote read of `plan` on the reader pool (see `submit`)."""
    return submit(log_reader, plan.state.topic, lambda: read_remote(log_reader, plan))


def await_result(log_reader, plan: ReadPlan, future, timeout_s: float) -> RemoteFetchResult:
    """The result of a read submitted to the reader pool, or RemoteFetchTimeoutError after
    `timeout_s` (the read is cancelled if it has not started)."""
    try:
        return future.result(timeout=max(0.0, timeout_s))
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise _timed_out(log_reader, plan) from None


def _timed_out(log_reader, plan: ReadPlan) -> RemoteFetchTimeoutError:
    """The error of a read that outlasted remote.fetch.max.wait.ms, counted as a failed
    fetch of its topic."""
    st, offset = plan.state, plan.offset
    log_reader.metrics.mark("RemoteFetchErrorsPerSec", st.topic)
    return RemoteFetchTimeoutError(
        f"remote read of partition {st.name} at offset {offset} did not finish within "
        f"remote.fetch.max.wait.ms ({log_reader.fetch_max_wait_ms} ms)", offset=offset)


def read_group(log_reader, plans: list[ReadPlan], done: list) -> list:
    """The remote reads of `plans` in turn (one reader-pool task), each one's result, or the
    exception it raised (one partition's failure is its own), appended to `done` as it
    ends (so a caller that stops waiting has the reads that finished); returns `done`."""
    for plan in plans:
        try:
            done.append(read_remote(log_reader, plan))
        except Exception as exc:  # handed to that partition's result
            done.append(exc)
    return done


def await_group(log_reader, plans: list[ReadPlan], future, done: list,
                timeout_s: float) -> list:
    """`read_group`'s outcomes; after `timeout_s`, those of the reads that finished (`done`)
    and RemoteFetchTimeoutError for the others, as a task a partition answers (the task is
    cancelled if it has not started; a read under way runs on and its verdicts stay)."""
    try:
        return future.result(timeout=max(0.0, timeout_s))
    except concurrent.futures.TimeoutError:
        future.cancel()
        finished = list(done)  # a snapshot: the task may append meanwhile
        return finished + [_timed_out(log_reader, plan) for plan in plans[len(finished):]]


class RemoteLogReader:
    """Answers the RemoteLogManager's reads and ListOffsets (see the module notes): the
    remote reads run on the caller's thread when they need no storage I/O, else on the
    reader pool, bounded by `remote.fetch.max.wait.ms`.

    Args:
        rlmm, rsm: the plugins.
        index_cache: the RemoteIndexCache.
        next_positions: where earlier remote reads ended (a consumer's next read starts
            there without an index lookup).
        metrics: the RemoteLogManager's metrics.
        fetch_rate, fetch_quota_sensor: the fetch quota
            (`remote.log.manager.fetch.max.bytes.per.second`) and its throttle-time sensor.
        reader_pool: the reader threads.
        fetch_max_wait_ms: `remote.fetch.max.wait.ms`.
        list_offsets_timeout_ms: `remote.list.offsets.request.timeout.ms`.
        inline_reads: whether a remote read may be tried on the caller's thread (the RLMM
            answers from memory: `in_memory_queries`).
        log_and_state: (the log, the RLM's state of the partition or None when it serves
            none) of a partition; raises for an unknown or offline one.
    """

    def __init__(self, *, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                 index_cache: RemoteIndexCache, next_positions: NextPositions,
                 metrics: RLMMetrics, fetch_rate: RLMQuota,
                 fetch_quota_sensor: ThrottleTimeSensor, reader_pool: RemoteLogReaderPool,
                 fetch_max_wait_ms: int, list_offsets_timeout_ms: int, inline_reads: bool,
                 log_and_state: Callable[[str, int],
                                         tuple[UnifiedLog, PartitionState | None]]):
        self.rlmm, self.rsm, self.index_cache = rlmm, rsm, index_cache
        self.next_positions, self.metrics = next_positions, metrics
        self.fetch_rate, self.fetch_quota_sensor = fetch_rate, fetch_quota_sensor
        self.reader_pool = reader_pool
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.list_offsets_timeout_ms = list_offsets_timeout_ms
        # a read that needs no storage I/O (indexes cached, segment open and mapped, RLMM
        # answering from memory) is served on the caller's thread: the hand-off to a reader
        # thread and back costs more than the read itself (bench/compare_remote_read.py)
        self.inline_reads = inline_reads
        self.log_and_state = log_and_state
        # bytes the fetch quota has recorded, ever: while they are at most what it allows
        # in a millisecond (its shortest span), no rate can be over it (the default quota,
        # Long.MAX_VALUE bytes a second, never is)
        self._fetched = 0
        self._fetched_lock = threading.Lock()

    def throttle_time_ms(self) -> int:
        """The fetch quota's throttle time (0 without asking it while no rate can be over
        the quota: see `_fetched`)."""
        if self._fetched * 1000 <= self.fetch_rate.quota:
            return 0
        return self.fetch_rate.throttle_time_ms()

    def record_fetched(self, nbytes: int) -> None:
        """Records the bytes of a remote read in the fetch quota."""
        with self._fetched_lock:
            self._fetched += nbytes
        self.fetch_rate.record(nbytes)

    def plan_read(self, topic: str, partition: int, offset: int, max_bytes: int,
                  min_one_message: bool, isolation: str) -> ReadPlan:
        """The plan of a read (see `plan_read`); raises what it and `log_and_state` raise,
        and ValueError for bad max_bytes or isolation."""
        check_read_args(max_bytes, isolation)
        unified, st = self.log_and_state(topic, partition)
        return plan_read(self, unified, st, topic, partition, offset, max_bytes,
                         min_one_message, isolation)

    def _read_inline(self, plan: ReadPlan) -> RemoteFetchResult | None:
        """The remote read of `plan` on the caller's thread when it needs no storage I/O,
        else None (it goes to the reader pool)."""
        if self.inline_reads and plan.isolation == "read_uncommitted":
            return read_remote(self, plan, nonblocking=True)
        return None

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             min_one_message: bool = True,
             isolation: str = "read_uncommitted") -> RemoteFetchResult:
        """Whole batches from `offset`: from the local log when `offset` >= the local log
        start offset, else from the remote tier: on the caller's thread when the read needs
        no storage I/O, else on the reader pool (the module docstring; the answers are the
        read model's, through engine.rlm.reader). read_committed stops at the last stable
        offset and lists aborted transactions.

        Raises:
            OffsetOutOfRangeError: `offset` outside [log start offset, log end offset], or
                not held by any copied segment.
            RemoteLogReaderRejectedError: the reader queue is full.
            RemoteFetchTimeoutError: the remote read took longer than
                `remote.fetch.max.wait.ms`.
            RemoteStorageError: the RSM failed.
            UnknownTopicOrPartitionError: no such partition. ValueError: bad max_bytes or
                isolation.
        """
        plan = self.plan_read(topic, partition, offset, max_bytes, min_one_message, isolation)
        if plan.answer is not None:
            return plan.answer
        answer = self._read_inline(plan)
        if answer is not None:
            return answer
        future = submit_read(self, plan)
        return await_result(self, plan, future, self.fetch_max_wait_ms / 1000.0)

    def read_many(self, requests: Iterable[tuple], *, min_one_message: bool = True,
                  isolation: str = "read_uncommitted") -> list[RemoteFetchResult]:
        """Reads several partitions: each request is (topic, partition, offset, max_bytes)
        or (..., min_one_message). Remote reads that need no storage I/O run on the
        caller's thread, as in `read`; the others run on the reader pool (`_read_on_pool`:
        in parallel, or as one task on a tier of local files) and are all bounded by one
        `remote.fetch.max.wait.ms` deadline (every partition may be read remotely, as after
        KAFKA-14915; Kafka 3.9 served only the first one). Never raises
        for one partition: a failed partition's result has `.error` set
        (OffsetOutOfRangeError, RemoteLogReaderRejectedError, RemoteFetchTimeoutError,
        RemoteStorageError, ...)."""
        results: list = []
        pending: list[tuple[int, ReadPlan]] = []
        for i, request in enumerate(requests):
            topic, partition, offset, max_bytes = request[:4]
            one = request[4] if len(request) > 4 else min_one_message
            try:
                plan = self.plan_read(topic, partition, offset, max_bytes, one, isolation)
                answer = plan.answer if plan.answer is not None else self._read_inline(plan)
                if answer is None:
                    pending.append((i, plan))
                results.append(answer)
            except Exception as exc:
                results.append(RemoteFetchResult(topic, int(partition), offset, b"", offset,
                                                 error=exc))
        for i, answer in self._read_on_pool(pending):
            results[i] = answer
        return results

    def _read_on_pool(self, pending: list[tuple[int, ReadPlan]]
                      ) -> list[tuple[int, RemoteFetchResult]]:
        """(index, result) of each read of `pending` (index, plan) that needs storage I/O,
        run on the reader pool and all bounded by one `remote.fetch.max.wait.ms` deadline:
        a task each, or, on a tier of local files (`rsm.reads_local_files`), one task for
        them all, run in turn (their waits are short, and the hand-offs between threads
        cost more than running them at once saves); either way a read that finished by the
        deadline is answered, the others time out. A failed read's result carries its
        error."""
        if len(pending) > 1 and self.rsm.reads_local_files:
            groups = [pending]
        else:
            groups = [[one] for one in pending]
        submitted: list[tuple[list, list[ReadPlan], concurrent.futures.Future | Exception,
                              list]] = []
        for group in groups:
            plans = [plan for _, plan in group]
            done: list = []
            task: concurrent.futures.Future | Exception
            try:
                task = self.reader_pool.submit(functools.partial(read_group, self, plans,
                                                                 done))
            except Exception as exc:  # the queue is full: each read fails with it
                for plan in plans:
                    self.metrics.mark("RemoteFetchErrorsPerSec", plan.state.topic)
                task = exc
            submitted.append((group, plans, task, done))
        deadline = time.monotonic() + self.fetch_max_wait_ms / 1000.0
        out = []
        for group, plans, future, done in submitted:
            outcomes = ([future] * len(plans) if isinstance(future, Exception) else
                        await_group(self, plans, future, done, deadline - time.monotonic()))
            for (i, plan), outcome in zip(group, outcomes):
                if isinstance(outcome, Exception):
                    st = plan.state
                    outcome = RemoteFetchResult(st.topic, st.partition, plan.offset, b"",
                                                plan.offset, True, error=outcome)
                out.append((i, outcome))
        return out

    def list_offsets(self, unified: UnifiedLog, st: PartitionState | None,
                     spec: int) -> tuple[int, int]:
        """(offset, leader epoch) for the parsed `spec` (engine.rlm.offsets). A remote
        timestamp search runs on the reader pool, bounded by
        `remote.list.offsets.request.timeout.ms`."""
        if spec < 0 or st is None:
            return offsets.list_offsets(self, unified, st, spec)
        future = submit(self, st.topic, lambda: offsets.list_offsets(self, unified, st, spec))
        timeout = self.list_offsets_timeout_ms / 1000.0
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RemoteFetchTimeoutError(
                f"ListOffsets by timestamp {spec} of {st.name} did not finish within "
                f"remote.list.offsets.request.timeout.ms ({timeout * 1000:.0f} ms)"
            ) from None
