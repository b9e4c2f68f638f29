"""How the RemoteLogManager answers a read (Kafka's ReplicaManager.readFromLog deciding
between the local log and RemoteLogManager.asyncRead).

`plan_read` decides, for one partition, how a read is answered and returns a `ReadPlan`:
an `answer` already (a local read; a remote read the fetch quota throttles), or a remote read
to run. `read_remote` runs it with the remote-fetch metrics and quota. The RLM's `read`
first tries a remote read inline with `nonblocking=True`, which returns None instead of
doing storage I/O (the plan then goes to the reader pool, `submit_read`), and waits on the pool
with `await_result`, bounded by `remote.fetch.max.wait.ms`.

The remote-segment access layer signals "this would need storage I/O" with its `WouldBlock`
exception, raised deep inside an index or range read; it ends here, so that callers see a
plain result (an answer or None).
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass

from engine.errors import OffsetOutOfRangeError, RemoteFetchTimeoutError
from engine.rlm import copier, reader
from engine.rlm.reader import RemoteFetchResult
from engine.rlm.state import PartitionState

__all__ = ["ISOLATION_LEVELS", "ReadPlan", "await_result", "check_read_args", "plan_read",
           "read_remote", "submit",
           "submit_read"]

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True)
class ReadPlan:
    """How one partition's read is answered: `answer` when nothing remote is left to do (a
    local read, or a remote read throttled by the fetch quota), else a remote read of
    `state` with the read's arguments."""

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


def plan_read(rlm, unified, st: PartitionState | None, topic: str, partition: int, offset: int,
              max_bytes: int, min_one_message: bool, isolation: str) -> ReadPlan:
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
    if st is not None and st.copy.metadata_gap is not None and \
            offset < unified.local_log_start_offset:
        raise copier.gap_error(st, offset)
    if offset >= unified.local_log_start_offset or st is None:
        try:
            return ReadPlan(offset, max_bytes, min_one_message, isolation,
                            answer=reader.read_local(unified, topic, partition, offset,
                                                     max_bytes, min_one_message, isolation))
        except OffsetOutOfRangeError:
            if st is None or offset < unified.log_start_offset:
                raise  # else local retention just removed it: read it remotely
    throttle = rlm.fetch_rate.throttle_time_ms()
    if throttle > 0:
        rlm.fetch_quota_sensor.record(throttle)
        return ReadPlan(offset, max_bytes, min_one_message, isolation,
                        answer=RemoteFetchResult(topic, int(partition), offset, b"", offset,
                                                 True, throttle_time_ms=throttle))
    return ReadPlan(offset, max_bytes, min_one_message, isolation, state=st)


def read_remote(rlm, plan: ReadPlan, nonblocking: bool = False) -> RemoteFetchResult | None:
    """Runs the remote read of `plan`, counting it in the remote-fetch metrics and the fetch
    quota. With `nonblocking`, None when it would need storage I/O (nothing is counted)."""
    st, offset = plan.state, plan.offset
    started = time.perf_counter()
    try:
        data, next_offset, aborted = reader.read_remote(rlm, st, offset, plan.max_bytes,
                                                        plan.min_one_message, plan.isolation,
                                                        nonblocking)
    except reader.WouldBlock:
        return None
    except Exception as exc:
        rlm.metrics.mark("RemoteFetchErrorsPerSec", st.topic)
        st.last_fetch_error = f"{type(exc).__name__}: {exc}"
        raise
    rlm.metrics.mark("RemoteFetchRequestsPerSec", st.topic)
    nbytes = memoryview(data).nbytes
    rlm.metrics.mark("RemoteFetchBytesPerSec", st.topic, nbytes)
    rlm.metrics.fetch_time.observe((time.perf_counter() - started) * 1000)
    rlm.fetch_rate.record(nbytes)
    return RemoteFetchResult(st.topic, st.partition, offset, data, next_offset, True,
                             aborted)


def submit(rlm, topic: str, work) -> concurrent.futures.Future:
    """`work` on the reader pool, counted as a failed fetch of `topic` when the pool refuses
    it (RemoteLogReaderRejectedError: its queue is full)."""
    try:
        return rlm.reader_pool.submit(work)
    except Exception:
        rlm.metrics.mark("RemoteFetchErrorsPerSec", topic)
        raise


def submit_read(rlm, plan: ReadPlan) -> concurrent.futures.Future:
    """The remote read of `plan` on the reader pool (see `submit`)."""
    return submit(rlm, plan.state.topic, lambda: read_remote(rlm, plan))


def await_result(rlm, plan: ReadPlan, future, timeout_s: float) -> RemoteFetchResult:
    """The result of a read submitted to the reader pool, or RemoteFetchTimeoutError after
    `timeout_s` (the read is cancelled if it has not started)."""
    st, offset = plan.state, plan.offset
    try:
        return future.result(timeout=max(0.0, timeout_s))
    except concurrent.futures.TimeoutError:
        future.cancel()
        rlm.metrics.mark("RemoteFetchErrorsPerSec", st.topic)
        raise RemoteFetchTimeoutError(
            f"remote read of partition {st.name} at offset {offset} did not finish within "
            f"remote.fetch.max.wait.ms ({rlm.fetch_max_wait_ms} ms)",
            offset=offset) from None
