"""The object-store tier (ObjectStorageRemoteStorageManager on a real S3 server, SeaweedFS, with
tests/fault_proxy.py in front) under store faults and damaged objects:

- a SLOW store (every request held) and an UNREACHABLE one (every connection dropped, or a
  closed loopback port) with the RLM's copy task running against it: appends and reads of
  local offsets go on without waiting for the store and without failing; once the store
  answers again the copies resume and every closed segment ends up tiered, with no object
  or metadata entry of the failed attempts left behind;
- copy retries against a failing store are spaced by the RLM's retry backoff
  (`remote.log.manager.task.retry.backoff.ms`, doubling): the PUTs counted through the
  proxy over a window are a handful, not the task interval's hot loop, one per failed run
  (RemoteCopyErrorsPerSec, the store's error counters); a run within the backoff sends
  nothing to the store at all;
- damaged `.log` objects, written through the RSM and then overwritten in the bucket (a zstd
  chunk with flipped bytes, an object truncated or with a byte inserted so the chunks no
  longer sit where the manifest's chunk index says, a GCM chunk with a flipped byte): every
  read path the RLM uses (read_range, map_range, read_range_into, read_range_once,
  fetch_log_segment) raises a typed error (a KafkaEngineError) whose message names the
  object key and a damaged chunk, never bytes; through the RLM too, where a flip zstd itself
  cannot see (its frames carry no checksum in the plugin's format) is caught by the batch
  CRC check instead of reaching a consumer.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import threading
import time
import uuid

import obstore
import pytest
import zstandard
from fault_proxy import Fault, FaultProxy
from s3_server import free_ports
from test_objectstore_transforms import write_key_pair
from test_tiered_scenarios import Broker, expected

from engine.common import Uuid
from engine.errors import (
    CorruptRecordError,
    CorruptRemoteObjectError,
    KafkaEngineError,
)
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from engine.log.producer_state import write_snapshot
from engine.log.segment import LogSegment
from engine.records import MemoryRecords, RecordBatchBuilder
from engine.remote.metadata import RemoteLogSegmentState, TopicIdPartition
from engine.remote.objectstore.manifest import SegmentManifest
from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

WAIT_S = 60  # upper bound of a wait for the scheduler's progress, never a timing claim
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED

# the RLM as a broker would run it, with short task intervals and backoffs so that a test
# sees several runs; one attempt per store call (no client retries), so one failed copy run
# is one PUT of its `.log`
RLM_PROPERTIES = ("log.local.retention.bytes=1\n"
                  "remote.log.manager.task.interval.ms=50\n"
                  "remote.log.manager.task.retry.backoff.ms=200\n"
                  "remote.log.manager.task.retry.backoff.max.ms=1600\n"
                  "rsm.config.storage.api.call.max.retries=0\n")


def _wait_for(predicate, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _bounded(fn, what: str, timeout_s: float = WAIT_S):
    """fn() on another thread, failing (not hanging) if it does not return in time."""
    out: list = []

    def run():
        try:
            out.append(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            out.append(("error", e))

    t = threading.Thread(target=run, daemon=True, name="bounded")
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"{what} blocked for {timeout_s} s"
    kind, value = out[0]
    if kind == "error":
        raise value
    return value


class _Endpoint:
    """The S3 server as the broker file sees it at `endpoint` (the fault proxy, or a port
    nothing listens on); the test itself lists the bucket directly."""

    def __init__(self, s3_server, endpoint: str):
        self.s3_server, self.endpoint = s3_server, endpoint

    def config(self):
        return self.s3_server.config(endpoint=self.endpoint)

    def raw_store(self):
        return self.s3_server.raw_store()


class _ProxyOnPort(FaultProxy):
    """A FaultProxy listening on a given port: the store "comes back" at the address the
    broker file named while nothing listened there."""

    def __init__(self, upstream_port: int, port: int):
        super().__init__(upstream_port)
        self._wanted_port = port

    def start(self) -> _ProxyOnPort:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self._wanted_port))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port = self._wanted_port
        t = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        t.start()
        self._threads.append(t)
        return self


def _records(view) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for batch in MemoryRecords(bytes(view)).batches()
            for r in batch]


def _produce_and_read_locally(broker, topic: str, batches: int) -> None:
    """Appends batch by batch, reading each back at once, then every local offset: all
    served by the local log (no remote read), with the records produced."""
    for _ in range(batches):
        (base,) = broker.produce(topic, batches=1)
        result = broker.rlm.read(topic, 0, base, 10_000)
        assert result.error is None and not result.from_remote
        assert _records(result.records) == expected(topic, 0, base, result.next_offset)
    unified = broker.log(topic)
    local_start = unified.local_log_start_offset
    records, remote = broker.consume(topic, offset=local_start)
    assert remote == 0
    assert records == expected(topic, 0, local_start, unified.high_watermark)


def _closed_bases(broker, topic: str) -> list[int]:
    return [s.base_offset for s in broker.log(topic).segments[:-1]]


def _everything_tiered(broker, topic: str) -> bool:
    """Every closed segment copied and then deleted locally (local.retention.bytes=1), no
    work left (failed attempts' metadata deleted too), and the bucket holding exactly the
    three objects of each copied segment."""
    unified = broker.log(topic)
    if len(unified.segments) != 1 or not broker.rlm.is_idle():
        return False
    finished = broker.remote_segments(topic)
    if not finished or finished[0].start_offset != 0 or \
            finished[-1].end_offset != unified.segments[0].base_offset - 1:
        return False
    if any(b.start_offset != a.end_offset + 1 for a, b in itertools.pairwise(finished)):
        return False
    everything = broker.remote_segments(topic, states=tuple(RemoteLogSegmentState))
    if any(m.state not in (FINISHED, DELETED) for m in everything):
        return False
    return len(broker.tiered_objects()) == 3 * len(finished)


def _check_all_tiered_and_readable(broker, topic: str) -> None:
    _wait_for(lambda: _everything_tiered(broker, topic), "every closed segment tiered")
    row = broker.rlm.status()[0]
    assert row["copy_failures"] == 0 and row["next_copy_retry_ms"] == 0
    unified = broker.log(topic)
    records, remote = broker.consume(topic)
    assert records == expected(topic, 0, 0, unified.high_watermark) and remote > 0


# ---- 1. local work while the store is slow or unreachable ----------------------------------

def test_local_work_goes_on_while_the_store_is_slow_and_copies_finish(
        tmp_path, s3_server, fault_proxy):
    """Every request held 1.5 s: while a copy sits in the store, appends and local reads are
    served (the same copy is still in progress after them: nothing waited for it); the slow
    store still tiers, and once it is fast again every segment ends up tiered."""
    broker = Broker(tmp_path, RLM_PROPERTIES,
                    s3_server=_Endpoint(s3_server, fault_proxy.endpoint))
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=9)
        assert len(_closed_bases(broker, "t")) >= 3
        fault_proxy.add(Fault("delay", delay_s=1.5, times=None))
        broker.rlm.start()

        def copying():
            return broker.rlm.status()[0]["copy_in_progress"]

        _wait_for(lambda: copying() is not None and fault_proxy.requests("PUT", ".log"),
                  "a copy in the slow store")
        before = copying()
        # a segment's copy is three held PUTs (.log, .indexes, manifest): 3 s at least
        _bounded(lambda: _produce_and_read_locally(broker, "t", batches=6),
                 "appends and local reads during a copy to a slow store")
        after = copying()
        assert after is not None and after["base_offset"] == before["base_offset"] and \
            after["running_ms"] >= before["running_ms"], \
            f"the appends or local reads waited for the copy in the slow store: {after}"
        _wait_for(lambda: broker.remote_segments("t"), "a segment tiered by the slow store")
        assert all(r.fault == "delay" for r in fault_proxy.requests())
        fault_proxy.clear()
        _check_all_tiered_and_readable(broker, "t")
    finally:
        broker.close()


@pytest.mark.parametrize("how", ["drop", "refused"])
def test_local_work_goes_on_while_the_store_is_unreachable_and_copies_resume(
        tmp_path, s3_server, fault_proxy, how):
    """Every connection dropped by the proxy, or a loopback port nothing listens on: the
    copy task keeps failing (and backing off) while appends and local reads are served;
    nothing is tiered meanwhile; once the store answers (the faults removed, or a proxy
    listening on that port) the copies resume, the failed attempts' metadata is cleaned up
    and every closed segment ends up tiered."""
    back = None
    if how == "drop":
        endpoint = fault_proxy.endpoint
        fault_proxy.add(Fault("drop", times=None))
    else:
        port = free_ports(1)[0]
        endpoint = f"http://127.0.0.1:{port}"
    broker = Broker(tmp_path, RLM_PROPERTIES, s3_server=_Endpoint(s3_server, endpoint))
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=9)
        closed = _closed_bases(broker, "t")
        assert len(closed) >= 3
        broker.rlm.start()
        _wait_for(lambda: broker.rlm.status()[0]["copy_failures"] >= 2,
                  "copy runs failing against the unreachable store")
        _bounded(lambda: _produce_and_read_locally(broker, "t", batches=6),
                 "appends and local reads while the store is unreachable")
        row = broker.rlm.status()[0]
        assert row["remote_segments"] == 0 and row["local_log_start_offset"] == 0
        assert "RemoteStorageError" in row["last_copy_error"], row["last_copy_error"]
        assert broker.tiered_objects() == []
        if how == "drop":
            assert fault_proxy.requests("PUT", ".log")
            assert all(r.fault == "drop" for r in fault_proxy.requests())
            fault_proxy.clear()
        else:
            back = _ProxyOnPort(s3_server.port, port).start()
        _check_all_tiered_and_readable(broker, "t")
        assert len(broker.remote_segments("t")) >= len(closed) + 1  # the new ones too
    finally:
        broker.close()
        if back is not None:
            back.stop()


# ---- 2. copy retries back off ---------------------------------------------------------------

_FAILED_RUN = re.compile(r"Copy task of t-0 failed \(attempt (\d+); retry in (\d+) ms\)")
_WINDOW_S = 4.0


@pytest.mark.parametrize("fault", ["503", "drop"])
def test_copy_retries_against_a_failing_store_are_spaced_by_the_backoff(
        tmp_path, s3_server, fault_proxy, caplog, fault):
    """Every PUT answered 503 (SlowDown), or every connection dropped, with the RLM's
    scheduler running (task interval 50 ms, backoff 200 ms doubling to 1.6 s): over a 4 s
    window the copy task makes a handful of attempts (the interval alone would allow about
    80), each one PUT of the `.log` and one RemoteCopyErrorsPerSec; the delays it logs grow;
    once the store answers the next retry tiers everything."""
    caplog.set_level("WARNING", logger="engine")
    broker = Broker(tmp_path, RLM_PROPERTIES,
                    s3_server=_Endpoint(s3_server, fault_proxy.endpoint))
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=9)
        if fault == "503":
            fault_proxy.add(Fault("status", method="PUT", status=503, times=None))
        else:
            fault_proxy.add(Fault("drop", times=None))
        broker.rlm.start()
        _wait_for(lambda: fault_proxy.requests("PUT", ".log"), "the first copy attempt")
        time.sleep(_WINDOW_S)  # a window of real time: the counts below bound the retry rate
        puts = len(fault_proxy.requests("PUT", ".log"))
        everything = len(fault_proxy.requests())
        errors = broker.rlm.metrics.value("RemoteCopyErrorsPerSec", topic="t") or 0
        # backoff: attempts at about 0, 0.2, 0.6, 1.4, 3.0, 4.6 s; no backoff: every 50 ms
        assert 2 <= puts <= 12, f"{puts} copy attempts in {_WINDOW_S} s"
        assert abs(errors - puts) <= 1, (errors, puts)  # one in flight at most
        # so are the other requests (each failed copy's cleanup deletes, and with every
        # request dropped the expiration task's retries of them): about 15-45 here, hundreds
        # in a hot loop
        assert everything <= 120, (everything, puts)
        kind = "throttling" if fault == "503" else "io"
        store_errors = broker.rlm.metrics.registry.get_sample_value(f"{kind}_errors_total")
        assert store_errors is not None and store_errors >= puts - 1, (kind, store_errors)
        # the delays the RLM chose (computed, not measured): 200, 400, 800, 1600 ms +-20%
        waits = [int(m.group(2)) for r in caplog.records
                 if (m := _FAILED_RUN.search(r.getMessage()))]
        assert len(waits) >= 2, [r.getMessage() for r in caplog.records]
        assert all(b > a for a, b in itertools.pairwise(waits[:4])), waits
        assert all(w <= 1600 for w in waits), waits
        row = broker.rlm.status()[0]
        assert row["copy_failures"] >= 2 and row["remote_segments"] == 0
        assert broker.tiered_objects() == []
        fault_proxy.clear()
        _check_all_tiered_and_readable(broker, "t")
    finally:
        broker.close()


def test_a_run_within_the_backoff_sends_nothing_to_the_store(tmp_path, s3_server,
                                                              fault_proxy):
    """A failed copy run (every PUT 503) sets a 30 s backoff: run_once within it makes no
    request to the store at all, reports the error and the time left, and counts the
    failure once."""
    extra = RLM_PROPERTIES.replace("retry.backoff.ms=200", "retry.backoff.ms=30000") \
        .replace("retry.backoff.max.ms=1600", "retry.backoff.max.ms=60000")
    broker = Broker(tmp_path, extra, s3_server=_Endpoint(s3_server, fault_proxy.endpoint))
    try:
        broker.create("t", remote_storage_enable=True)
        broker.produce("t", batches=9)
        fault_proxy.add(Fault("status", method="PUT", status=503, times=None))
        summary = broker.rlm.run_once()
        assert summary.copied_segments == 0 and summary.errors
        assert len(fault_proxy.requests("PUT", ".log")) == 1
        sent = len(fault_proxy.requests())
        for _ in range(3):
            summary = broker.rlm.run_once()
            assert summary.copied_segments == 0
            assert any("copy" in e for e in summary.errors), summary.errors
            assert summary.retry_in_ms > 10_000  # 30 s -20%, less the time since
        assert len(fault_proxy.requests()) == sent
        assert broker.rlm.status()[0]["copy_failures"] == 1
        assert broker.rlm.metrics.value("RemoteCopyErrorsPerSec", topic="t") == 1
        assert broker.rlm.metrics.registry.get_sample_value("throttling_errors_total") == 1
        assert broker.remote_segments("t") == [] and broker.tiered_objects() == []
    finally:
        broker.close()


# ---- 3. damaged chunks in real stored objects -----------------------------------------------

TIP = TopicIdPartition(Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"), "faulty-topic", 2)
CHUNK = 1000
BASE = 100


@pytest.fixture(scope="module")
def segment(tmp_path_factory):
    """A closed segment at offset 100 of compressible records (so zstd chunks are
    compressed blocks, not raw ones): (LogSegmentData, last offset, .log size)."""
    from rsm_crash_writer import load_segment_data

    directory = tmp_path_factory.mktemp("segment")
    seg = LogSegment.create(directory, BASE, index_interval_bytes=1024,
                            max_index_size=1 << 20)
    offset = BASE
    for _ in range(31):
        builder = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=0)
        for r in range(10):
            builder.append(b"payment %08d amount=%d currency=EUR status=settled" % (
                offset + r, (offset + r) * 37 % 1000), key=b"k%d" % r,
                timestamp=1_700_000_000_000 + offset + r)
        last = offset + 9
        seg.append(last, 1_700_000_000_000 + last, last, builder.build())
        offset = last + 1
    seg.on_become_inactive_segment()
    size = seg.size_in_bytes
    seg.close()
    write_snapshot(directory / f"{offset:020d}.snapshot", [], sync=False)
    LeaderEpochCheckpointFile(directory / f"{BASE:020d}.epochs", create=False).write(
        [EpochEntry(0, BASE)], sync=False)
    return load_segment_data(directory, BASE), offset - 1, size


@pytest.fixture(scope="module")
def key_files(tmp_path_factory):
    public, private, _ = write_key_pair(tmp_path_factory.mktemp("keys"), "k1")
    return public, private


def _configs(s3_server, key_files, mode: str) -> dict:
    configs = dict(s3_server.config())
    configs["key.prefix"] = f"faults-{uuid.uuid4().hex[:8]}/"
    configs["chunk.size"] = str(CHUNK)
    if "zstd" in mode:
        configs["compression.enabled"] = "true"
    if "encrypted" in mode:
        public, private = key_files
        configs.update({"encryption.enabled": "true", "encryption.key.pair.id": "k1",
                        "encryption.key.pairs": "k1",
                        "encryption.key.pairs.k1.public.key.file": public,
                        "encryption.key.pairs.k1.private.key.file": private})
    return configs


class _Uploaded:
    """A segment copied through the RSM: its metadata, `.log` key, stored bytes and the
    manifest's chunk index (parsed from the stored manifest)."""

    def __init__(self, s3_server, rsm, segment):
        from rsm_crash_writer import segment_metadata

        data, last, size = segment
        md = segment_metadata(TIP, BASE, last, size)
        custom = rsm.copy_log_segment_data(md, data)
        self.md = segment_metadata(TIP, BASE, last, size, md.remote_log_segment_id.id, custom)
        self.size = size
        self.original = data.log_segment.read_bytes()
        self.store = s3_server.raw_store()
        self.key = rsm.keys.key(self.md, "log")
        manifest_key = rsm.keys.key(self.md, "rsm-manifest")
        manifest = bytes(obstore.get(self.store, manifest_key).bytes())
        self.manifest = json.loads(manifest)
        self.index = SegmentManifest.parse(manifest, manifest_key).chunk_index
        self.stored = bytes(obstore.get(self.store, self.key).bytes())
        assert len(self.stored) == self.index.transformed_range(self.index.chunk_count - 1)[1]

    def chunk(self, i: int) -> bytes:
        a, b = self.index.transformed_range(i)
        return self.stored[a:b]

    def overwrite(self, damaged: bytes) -> None:
        assert damaged != self.stored
        obstore.put(self.store, self.key, damaged)


def _read_paths(rsm, md, start: int, end: int):
    """The RSM's reads of `.log` bytes [start, end) (the RLM's paths and the KIP-405 one)."""
    def stream():
        with rsm.fetch_log_segment(md, start, end - 1) as f:
            return f.read()

    def into():
        buffer = bytearray(end - start)
        rsm.read_range_into(md, start, buffer)
        return buffer

    return {"read_range": lambda: rsm.read_range(md, start, end),
            "map_range": lambda: rsm.map_range(md, start, end),
            "read_range_into": into,
            "read_range_once": lambda: rsm.read_range_once(md, start, end),
            "fetch_log_segment": stream}


def _named_chunks(error: BaseException) -> set[int]:
    return {int(n) for n in re.findall(r"\bchunk (\d+)\b", str(error))}


def _check_damage_is_named(rsm, up: _Uploaded, damaged_chunks: set[int]) -> None:
    """Every read path, over the whole segment and over the first damaged chunk alone,
    raises a KafkaEngineError naming the object key and a damaged chunk (the `chunk` field
    too, when the error has one). All problems are reported together."""
    first = min(damaged_chunks)
    ranges = {"whole segment": (0, up.size), f"chunk {first}": up.index.original_range(first)}
    problems = []
    for what, (start, end) in ranges.items():
        for path, read in _read_paths(rsm, up.md, start, end).items():
            where = f"{path} of {what} [{start}, {end})"
            try:
                got = read()
            except KafkaEngineError as e:
                text = f"{type(e).__name__}: {e}"
                if up.key not in str(e):
                    problems.append(f"{where}: the object key is not named: {text}")
                if not _named_chunks(e) & damaged_chunks:
                    problems.append(f"{where}: no damaged chunk {sorted(damaged_chunks)} "
                                    f"named: {text}")
                chunk = getattr(e, "chunk", None)
                if chunk is not None and chunk not in damaged_chunks:
                    problems.append(f"{where}: its chunk field {chunk} is not damaged: {text}")
                continue
            except Exception as e:  # noqa: BLE001 - an untyped error is the finding
                problems.append(f"{where}: not a KafkaEngineError: {type(e).__name__}: {e}")
                continue
            same = bytes(got) == up.original[start:end]
            problems.append(f"{where}: no error ({'the right' if same else 'WRONG'} bytes)")
    assert not problems, "\n".join(problems)


@pytest.fixture
def upload(s3_server, segment, key_files):
    """upload(mode) -> (rsm, _Uploaded): a fresh RSM (no chunk cache) and its copy."""
    opened = []

    def make(mode: str):
        rsm = ObjectStorageRemoteStorageManager()
        rsm.configure(_configs(s3_server, key_files, mode))
        opened.append(rsm)
        up = _Uploaded(s3_server, rsm, segment)
        assert up.manifest["compression"] is ("zstd" in mode)
        assert ("encryption" in up.manifest) is ("encrypted" in mode)
        # the intact object reads back exactly
        assert rsm.read_range(up.md, 0, up.size) == up.original
        return rsm, up

    yield make
    for rsm in opened:
        rsm.close()


DAMAGED = 5  # a chunk in the middle of the segment's ~22


@pytest.mark.parametrize("where", ["magic", "content size", "block"])
def test_flipped_bytes_in_a_zstd_chunk_name_the_object_and_chunk(upload, where):
    """(a) A zstd chunk with flipped bytes: its frame's magic number, the content size in
    its frame header, or every byte of its compressed block. (One byte flipped inside a
    block is not always visible to zstd, whose frames carry no checksum in the plugin's
    format: the RLM test at the end shows the batch CRC catching that.)"""
    rsm, up = upload("zstd")
    chunk = up.chunk(DAMAGED)
    params = zstandard.get_frame_parameters(chunk)
    assert params.content_size == CHUNK
    header = zstandard.frame_header_size(chunk)
    a, b = up.index.transformed_range(DAMAGED)
    damaged = bytearray(up.stored)
    if where == "magic":
        for i in range(a, a + 4):
            damaged[i] ^= 0xFF
    elif where == "content size":  # the frame header's last field
        damaged[a + header - 1] ^= 0x01
    else:
        for i in range(a + header, b):
            damaged[i] ^= 0xFF
    up.overwrite(bytes(damaged))
    _check_damage_is_named(rsm, up, {DAMAGED})


@pytest.mark.parametrize("mode,damage", [
    ("plain", "truncated"), ("zstd", "truncated"), ("encrypted", "truncated"),
    ("zstd", "extra byte"), ("encrypted", "extra byte"),
])
def test_a_chunk_of_the_wrong_size_names_the_object_and_chunk(upload, mode, damage):
    """(b) Chunks that no longer match the manifest's chunk index: the object cut 7 bytes
    short (its last chunk is short), or one byte inserted in the middle of a chunk (that
    chunk and every later one shifted against the index)."""
    rsm, up = upload(mode)
    last = up.index.chunk_count - 1
    if damage == "truncated":
        assert up.index.transformed_range(last)[1] - up.index.transformed_range(last)[0] > 7
        up.overwrite(up.stored[:-7])
        damaged_chunks = {last}
    else:
        a, b = up.index.transformed_range(DAMAGED)
        mid = (a + b) // 2
        up.overwrite(up.stored[:mid] + b"\x00" + up.stored[mid:])
        damaged_chunks = set(range(DAMAGED, last + 1))
    _check_damage_is_named(rsm, up, damaged_chunks)


@pytest.mark.parametrize("mode", ["encrypted", "zstd+encrypted"])
def test_a_flipped_byte_in_a_gcm_chunk_names_the_object_and_chunk(upload, mode):
    """(c) One bit flipped in the ciphertext of an AES-GCM chunk: its tag does not
    verify."""
    rsm, up = upload(mode)
    a, b = up.index.transformed_range(DAMAGED)
    damaged = bytearray(up.stored)
    damaged[a + 12 + (b - a - 28) // 2] ^= 0x01  # past the IV, before the tag
    up.overwrite(bytes(damaged))
    _check_damage_is_named(rsm, up, {DAMAGED})


def _zstd_block(frame: bytes) -> tuple[int, int, int]:
    """(block type, content start, content size) of a frame's first block (RFC 8878
    3.1.1.2: a 3-byte little-endian header after the frame header; type 0 is Raw)."""
    at = zstandard.frame_header_size(frame)
    header = int.from_bytes(frame[at:at + 3], "little")
    return (header >> 1) & 3, at + 3, header >> 3


def test_damaged_chunks_never_reach_a_consumer_through_the_rlm(tmp_path, s3_server):
    """Through the RemoteLogManager (zstd, 100-byte chunks, records of incompressible
    values): a segment whose chunk lost its zstd magic fails the read with the RSM's typed
    error naming the object and chunk; a byte flipped inside a Raw zstd block (which zstd
    itself cannot notice: the plugin's frames carry no checksum) fails it with the batch
    CRC error naming the segment; other segments read on; no damaged record is served."""
    import random

    broker = Broker(tmp_path, "log.local.retention.bytes=1\n"
                              "rsm.config.compression.enabled=true\n", s3_server=s3_server)
    try:
        broker.create("t", remote_storage_enable=True)
        rng = random.Random(5)
        acked = []
        for _ in range(8):
            base = broker.log("t").log_end_offset
            builder = RecordBatchBuilder()
            values = [rng.randbytes(120) for _ in range(2)]
            for i, v in enumerate(values):
                builder.append(v, key=b"k", timestamp=1_600_000_000_000 + base + i)
            broker.manager.append_as_leader("t", 0, builder.build(), 0)
            acked += [(base + i, v) for i, v in enumerate(values)]
        broker.tier()
        segments = broker.remote_segments("t")
        assert len(segments) >= 3
        rsm = broker.rlm.rsm
        store = s3_server.raw_store()

        def stored(md):
            key = rsm.keys.key(md, "log")
            manifest_key = rsm.keys.key(md, "rsm-manifest")
            index = SegmentManifest.parse(bytes(obstore.get(store, manifest_key).bytes()),
                                          manifest_key).chunk_index
            return key, index, bytearray(obstore.get(store, key).bytes())

        # segment 0: chunk 0 without its zstd magic
        key0, _, data0 = stored(segments[0])
        for i in range(4):
            data0[i] ^= 0xFF
        obstore.put(store, key0, bytes(data0))
        # segment 1: one byte flipped inside the Raw block of chunk 1 (record values only)
        key1, index1, data1 = stored(segments[1])
        a, b = index1.transformed_range(1)
        kind, content, length = _zstd_block(bytes(data1[a:b]))
        lo, hi = index1.original_range(1)
        assert kind == 0 and length == hi - lo, (kind, length)  # a Raw block: the bytes as is
        data1[a + content + length // 2] ^= 0x01
        obstore.put(store, key1, bytes(data1))
        broker.restart()  # nothing cached

        with pytest.raises(CorruptRemoteObjectError) as info:
            broker.rlm.read("t", 0, segments[0].start_offset, 100_000)
        assert key0 in str(info.value) and info.value.chunk == 0
        assert re.search(r"\bchunk 0\b", str(info.value)), str(info.value)
        with pytest.raises(CorruptRecordError) as info:
            broker.rlm.read("t", 0, segments[1].start_offset, 100_000)
        assert str(segments[1].remote_log_segment_id.id) in str(info.value)
        assert "CRC" in str(info.value)
        # the segments after them are served as they were produced
        start = segments[2].start_offset
        result = broker.rlm.read("t", 0, start, 100_000)
        assert result.from_remote and result.error is None
        got = _records(result.records)
        assert got and got == [r for r in acked if start <= r[0] < result.next_offset]
    finally:
        broker.close()
