"""Shared set-up of the RemoteLogManager tests: a LogManager on real dirs, the filesystem
RSM, the embedded RLMM and an RLM over them (no tests here)."""

from __future__ import annotations

import threading

from engine.config import BrokerConfig
from engine.log import LogManager
from engine.records import MemoryRecords, RecordBatchBuilder
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.rlm import RemoteLogManager

T0 = 1_700_000_000_000
TOPIC = "orders"


class FakeClock:
    """A clock in ms that only moves when told (quota waits advance it)."""

    def __init__(self, now: int = T0 + 10_000_000):
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def advance(self, ms: int) -> None:
        with self._lock:
            self.now += ms

    def sleep(self, ms: int) -> None:
        self.advance(ms)


def batch(values, *, timestamp=T0, key=b"k") -> bytes:
    b = RecordBatchBuilder(base_offset=0)
    for i, v in enumerate(values):
        b.append(v, key=key, timestamp=timestamp + i)
    return b.build()


class Env:
    """Logs in `<tmp>/logs`, the filesystem tier in `<tmp>/remote`, RLMM metadata in the
    log dir. `topic_config` overrides apply to every topic created with `log()`."""

    def __init__(self, tmp_path, *, broker=None, topic_config=None, clock=None, rsm=None,
                 log_dirs=1):
        self.tmp = tmp_path
        self.log_dirs = [tmp_path / f"logs{i}" for i in range(log_dirs)]
        self.remote_dir = tmp_path / "remote"
        props = {"log.dirs": ",".join(map(str, self.log_dirs)),
                 "remote.log.storage.system.enable": "true",
                 "rsm.config.dirs": str(self.remote_dir),
                 "remote.log.manager.task.interval.ms": "50",
                 "remote.log.reader.threads": "4"}
        props.update({k: str(v) for k, v in (broker or {}).items()})
        self.config = BrokerConfig(props)
        self.clock = clock or FakeClock()
        self.topic_config = {"remote.storage.enable": "true", "segment.bytes": "1200",
                             "retention.ms": "-1", "index.interval.bytes": "1",
                             **{k: str(v) for k, v in (topic_config or {}).items()}}
        # topic defaults, so that logs loaded again after a restart keep tiering
        self.lm = LogManager(self.log_dirs, broker_config=self.config, clock=self.clock,
                             topic_defaults=self.topic_config)
        self.rsm = rsm or FileSystemRemoteStorageManager([self.remote_dir], fsync=False)
        self.rlmm = EmbeddedRemoteLogMetadataManager(self.log_dirs[0] / "__remote_log_metadata")
        self.rlm = RemoteLogManager(self.config, self.lm, self.rsm, self.rlmm,
                                    clock=self.clock)
        self.acked: dict[tuple[str, int], list[tuple[int, bytes]]] = {}

    def log(self, topic=TOPIC, partition=0, **overrides):
        config = {**self.topic_config, **{k: str(v) for k, v in overrides.items()}}
        return self.lm.get_or_create_log(topic, partition, topic_config=config)

    def produce(self, n_batches, *, topic=TOPIC, partition=0, epoch=0, per_batch=3,
                size=100, timestamp=None):
        """Appends `n_batches` batches as leader; returns the (first, last) offsets."""
        unified = self.log(topic, partition)
        acked = self.acked.setdefault((topic, partition), [])
        first = None
        for _ in range(n_batches):
            n = len(acked)
            values = [f"{topic}-{partition}-{n + i}-".encode().ljust(size, b"x")
                      for i in range(per_batch)]
            ts = timestamp if timestamp is not None else T0 + n * 1000
            lo, hi = unified.append_as_leader(batch(values, timestamp=ts), epoch)
            first = lo if first is None else first
            acked.extend((lo + i, v) for i, v in enumerate(values))
        return first, hi

    def close(self):
        self.rlm.close()
        self.rlmm.close()
        self.rsm.close()
        self.lm.shutdown()


def records_of(data) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in MemoryRecords(bytes(data)).records()]


def read_all(rlm, topic, partition, start, end, max_bytes=100_000, **kw):
    """Every (offset, value) in [start, end) following next_offset hints."""
    out, offset = [], start
    while offset < end:
        result = rlm.read(topic, partition, offset, max_bytes, **kw)
        assert result.next_offset > offset, (offset, result)
        out += [(o, v) for o, v in records_of(result.records) if o >= offset]
        offset = result.next_offset
    return out


def txn_batch(values, *, producer_id, producer_epoch=0, sequence=0, timestamp=T0) -> bytes:
    b = RecordBatchBuilder(base_offset=0, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=sequence,
                           is_transactional=True)
    for i, v in enumerate(values):
        b.append(v, key=b"t", timestamp=timestamp + i)
    return b.build()


def marker(commit: bool, *, producer_id, producer_epoch=0, timestamp=T0) -> bytes:
    from engine.records import build_end_txn_marker

    return build_end_txn_marker(commit, base_offset=0, producer_id=producer_id,
                                producer_epoch=producer_epoch, timestamp=timestamp)
