"""Turns the conformance vectors in `<repo>/../shared/vectors` into raw Kafka records blobs.

A *records blob* is what Kafka calls `records` in a Fetch response or Produce request and what a
`.log` segment holds: record batches (magic 2) and/or legacy message-set entries (magic 0/1),
concatenated, possibly ending in a truncated entry. This module only *locates* those blobs; it
never decodes records (that is the engine's job, tested in test_vectors_conformance.py).

Vector file shapes handled here (see each folder's MANIFEST.md):

- bare records blobs: kafka-python, rskafka, sarama `record_test__*`, kafkajs `messageSet__*` and
  `recordBatch__v0_recordbatch*`, codecrafters `.log` segments;
- Fetch response bodies, v0..v12 (kafkajs, sarama), some behind a prefix: kafka-rust files are
  `[int32 correlationId][Fetch v0 body]`, kafka-go `.hex` files are ASCII hex of
  `[int32 size][int32 correlationId][Fetch v10 body]`;
- Produce request bodies v2..v7 (kafkajs);
- pieces that need a frame around them before a records reader can take them (the frame is
  synthesized here and marked `synthetic_prefix`): sarama `message_test__*` (a legacy message
  without its 12-byte offset/size prefix), kafkajs `recordBatch__v0_record` (one v2 record body
  without its length varint), kafkajs `recordBatch_crc32C__crcPayload` (the CRC-covered tail of a
  v2 batch, from `attributes` on; its CRC is stated by the source).

Protocol layouts (all integers big-endian; Kafka protocol "bytes" = int32 length, -1 = null):

Fetch response body, non-flexible (v0..v11):
    [throttle_time_ms int32]                       v1+
    [error_code int16][session_id int32]           v7+
    responses: int32 count of
        topic string(int16 length)
        partitions: int32 count of
            partition_index int32, error_code int16, high_watermark int64,
            last_stable_offset int64                   v4+
            log_start_offset int64                     v5+
            aborted_transactions: int32 count (-1 = null) of                           v4+
                {producer_id int64, first_offset int64}
            preferred_read_replica int32               v11+
            records bytes
Fetch response body, flexible (v12+): same field order, but arrays are compact (unsigned varint
count + 1, 0 = null), strings are compact (unsigned varint length + 1), records are compact
bytes, and every struct (response, topic, partition, aborted transaction) ends in a tagged-field
section (unsigned varint count, then per field: unsigned varint tag, unsigned varint size, data).
From v13 the topic name is replaced by a 16-byte topic id.

Produce request body, non-flexible (v0..v8):
    [transactional_id nullable string]             v3+
    acks int16, timeout_ms int32,
    topic_data: int32 count of
        {name string, partition_data: int32 count of {index int32, records bytes}}
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "REPO_ROOT", "VECTORS", "FOLDERS", "RecordsBlob", "FetchResponse", "FetchTopic",
    "FetchPartition", "AbortedTransaction", "ProduceRequest", "ProducePartition", "EntrySpan",
    "FramingScan", "VectorFormatError", "vector_files", "record_vector_files", "read_vector_bytes",
    "kind_of", "short_id", "load_blobs", "load_blob", "all_blobs", "parse_fetch_response",
    "parse_produce_request", "scan_entry_framing", "wrap_legacy_message",
    "wrap_record_body_in_batch", "batch_from_crc_payload", "encode_varint", "crc32c",
    "xerial_snappy_chunks", "read_kafkajs_json", "load_fetch_response", "LOG_OVERHEAD",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS = (REPO_ROOT / ".." / "shared" / "vectors").resolve()

# The folders whose files carry Kafka records (aiven-tiered-storage-json holds RSM JSON only).
FOLDERS = (
    "kafka-python-literals",
    "kafka-rust-test-data",
    "kafkajs-fixtures",
    "kafka-go-fixtures",
    "rskafka-literals",
    "sarama-literals",
    "codecrafters-kafka-tester-kraft-datadir",
)

LOG_OVERHEAD = 12          # offset int64 + size int32
HEADER_SIZE_UP_TO_MAGIC = 17
MAGIC_OFFSET = 16


class VectorFormatError(ValueError):
    """A vector file does not have the shape this module expects (a helper bug or a bad file)."""


# --------------------------------------------------------------------------------------------
# What each file is

# sarama fetch_response_test__* files: the Fetch version each literal is encoded in. The names
# only partly say it; every version below is confirmed by the helper tests, which require the
# parser to consume each body exactly.
_SARAMA_FETCH_VERSIONS = {
    "emptyFetchResponse": 0,
    "oneMessageFetchResponse": 0,
    "overflowMessageFetchResponse": 0,
    "oneRecordFetchResponse": 4,
    "partialFetchResponse": 4,
    "oneMessageFetchResponseV4": 4,
    "emptyRecordsFetchResponsev11": 11,
    "preferredReplicaFetchResponseV11": 11,
    "preferredReplicaFetchResponseV12": 12,
    "abortedTxnFetchResponseV12": 12,
}

_SKIPPED_NAMES = re.compile(r"^(MANIFEST\.md|DECODED\.txt|README\.md|LICEN[CS]E.*)$")


def kind_of(relpath: str) -> tuple[str, dict]:
    """Classify a vector file (path relative to VECTORS).

    Returns (kind, info). kinds:
      "records"            records blob (batches / message sets / a .log segment); info: prefix
                           "size" when an int32 byte count precedes it (kafkajs messageSet__*)
      "fetch-response"     info: version, prefix ("none" | "corr" | "size+corr"), hex (bool)
      "produce-request"    info: version
      "legacy-message"     legacy message without offset/size prefix (sarama message_test__*)
      "record-body"        one v2 record body without its length varint (kafkajs)
      "crc-payload"        CRC-covered tail of a v2 batch (kafkajs), info: crc
      "control-record"     a control record key or value (sarama control_record_test__*)
      "snappy-stream"      a xerial-framed snappy stream, not Kafka records (kafka-rust)
      "expected-text"      the produced input text of kafka-rust vectors (fetch1.txt, fetch2.txt)
      "other"              a file of the data dir that is not records (.index, checkpoints, ...)
    """
    folder, _, _rest = relpath.partition("/")
    name = Path(relpath).name
    if folder == "kafka-python-literals":
        return "records", {}
    if folder == "rskafka-literals":
        return "records", {}
    if folder == "codecrafters-kafka-tester-kraft-datadir":
        return ("records", {}) if name.endswith(".log") else ("other", {})
    if folder == "kafka-rust-test-data":
        if name.endswith(".txt"):
            return "expected-text", {}
        if name == "fetch1.snappy.chunked.4k":
            return "snappy-stream", {}
        return "fetch-response", {"version": 0, "prefix": "corr", "hex": False}
    if folder == "kafka-go-fixtures":
        if name.endswith(".hex"):
            return "fetch-response", {"version": 10, "prefix": "size+corr", "hex": True}
        return "other", {}  # .pcapng captures of the same responses
    if folder == "kafkajs-fixtures":
        if name.endswith(".json"):
            return "other", {}  # the same bytes as the .bin next to it, as a JSON Buffer
        m = re.match(r"requests_fetch__v(\d+)_", name)
        if m:
            return "fetch-response", {"version": int(m.group(1)), "prefix": "none", "hex": False}
        m = re.match(r"requests_produce__v(\d+)_", name)
        if m:
            return "produce-request", {"version": int(m.group(1))}
        if name == "recordBatch__v0_record.bin":
            return "record-body", {}
        if name == "recordBatch_crc32C__crcPayload.bin":
            return "crc-payload", {"crc": 818496390}  # stated by the kafkajs fixture's test
        if name.startswith("messageSet__"):
            # kafkajs' MessageSet encoder output keeps its int32 byte-size prefix
            return "records", {"prefix": "size"}
        return "records", {}
    if folder == "sarama-literals":
        if name.startswith("message_test__"):
            return "legacy-message", {}
        if name.startswith("record_test__"):
            return "records", {}
        if name.startswith("control_record_test__"):
            return "control-record", {}
        m = re.match(r"fetch_response_test__(\w+?)_L\d+\.bin$", name)
        if m:
            return "fetch-response", {"version": _SARAMA_FETCH_VERSIONS[m.group(1)],
                                      "prefix": "none", "hex": False}
    raise VectorFormatError(f"unknown vector file {relpath}")


def vector_files(folder: str | None = None) -> list[str]:
    """Every data file (relative to VECTORS) of the record folders, sorted; MANIFEST, DECODED,
    README and licence files excluded."""
    out = []
    for f in FOLDERS if folder is None else (folder,):
        for p in sorted((VECTORS / f).rglob("*")):
            if p.is_file() and not _SKIPPED_NAMES.match(p.name):
                out.append(p.relative_to(VECTORS).as_posix())
    return out


_RECORD_KINDS = ("records", "fetch-response", "produce-request", "legacy-message",
                 "record-body", "crc-payload")


def record_vector_files(folder: str | None = None) -> list[str]:
    """The vector files that yield records blobs (see load_blobs)."""
    return [p for p in vector_files(folder) if kind_of(p)[0] in _RECORD_KINDS]


def short_id(relpath: str) -> str:
    """A test id for a vector path, short enough for pytest (which falls back to `argN`
    for string ids over 100 characters)."""
    return (relpath.replace("codecrafters-kafka-tester-kraft-datadir/", "codecrafters/")
            .replace("/kraft-combined-logs/", "/"))


def read_vector_bytes(relpath: str) -> bytes:
    """The file's bytes; kafka-go `.hex` files are returned decoded from ASCII hex."""
    raw = (VECTORS / relpath).read_bytes()
    if relpath.endswith(".hex"):
        return bytes.fromhex(raw.decode("ascii").strip())
    return raw


def read_kafkajs_json(relpath: str) -> bytes:
    """The bytes of a kafkajs `{"type":"Buffer","data":[...]}` fixture."""
    doc = json.loads((VECTORS / relpath).read_text())
    if doc.get("type") != "Buffer":
        raise VectorFormatError(f"{relpath}: not a JSON Buffer")
    return bytes(doc["data"])


# --------------------------------------------------------------------------------------------
# Results

@dataclass(frozen=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True)
class FetchPartition:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int | None          # v4+
    log_start_offset: int | None            # v5+
    aborted_transactions: tuple[AbortedTransaction, ...] | None  # v4+; None = null array
    preferred_read_replica: int | None      # v11+
    records: bytes | None                   # None = null records
    records_position: int                   # byte position of the records data in the file
    tagged_fields: dict[int, bytes] = field(default_factory=dict)  # v12+


@dataclass(frozen=True)
class FetchTopic:
    topic: str | None                       # None from v13 (topic ids)
    topic_id: bytes | None
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True)
class FetchResponse:
    version: int
    throttle_time_ms: int | None
    error_code: int | None
    session_id: int | None
    topics: tuple[FetchTopic, ...]
    size: int                               # bytes consumed from the body


@dataclass(frozen=True)
class ProducePartition:
    partition: int
    records: bytes | None
    records_position: int


@dataclass(frozen=True)
class ProduceRequest:
    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[tuple[str, tuple[ProducePartition, ...]], ...]
    size: int


@dataclass(frozen=True)
class RecordsBlob:
    """One records blob found in a vector file, with what names it.

    `position` is where the blob's own bytes start in the file (for `.hex` files: in the decoded
    bytes). When the blob is not a verbatim slice of the file, `synthetic_prefix` is the number of
    bytes this module put in front of the file's bytes (`data[synthetic_prefix:]` is the file
    slice) and `note` says why.
    """

    file: str                               # relative to VECTORS
    kind: str                               # see kind_of()
    data: bytes
    position: int
    topic: str | None = None
    partition: int | None = None
    fetch_version: int | None = None
    produce_version: int | None = None
    correlation_id: int | None = None
    fetch_partition: FetchPartition | None = None
    synthetic_prefix: int = 0
    note: str = ""

    @property
    def id(self) -> str:
        if self.partition is None:
            return self.file
        return f"{self.file}[{self.topic}-{self.partition}]"

    @property
    def aborted_transactions(self):
        fp = self.fetch_partition
        return None if fp is None else fp.aborted_transactions

    @property
    def high_watermark(self):
        return None if self.fetch_partition is None else self.fetch_partition.high_watermark


# --------------------------------------------------------------------------------------------
# A small bounded reader for the protocol

class _Reader:
    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None, what: str = ""):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.what = what

    def _take(self, n: int) -> int:
        if n < 0 or self.pos + n > self.end:
            raise VectorFormatError(
                f"{self.what}: need {n} bytes at {self.pos}, only {self.end - self.pos} left")
        p = self.pos
        self.pos += n
        return p

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        p = self._take(size)
        return struct.unpack_from(fmt, self.buf, p)[0]

    def int8(self): return self.unpack(">b")
    def int16(self): return self.unpack(">h")
    def int32(self): return self.unpack(">i")
    def int64(self): return self.unpack(">q")

    def raw(self, n: int) -> bytes:
        p = self._take(n)
        return bytes(self.buf[p:p + n])

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(5):
            b = self.raw(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise VectorFormatError(f"{self.what}: unsigned varint longer than 5 bytes at {self.pos}")

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise VectorFormatError(f"{self.what}: null string at {self.pos - 2}")
        return self.raw(n).decode("utf-8")

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.raw(n).decode("utf-8")

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.raw(n).decode("utf-8")

    def bytes_field(self) -> tuple[bytes | None, int]:
        n = self.int32()
        if n < 0:
            return None, self.pos
        p = self.pos
        return self.raw(n), p

    def compact_bytes(self) -> tuple[bytes | None, int]:
        n = self.uvarint() - 1
        if n < 0:
            return None, self.pos
        p = self.pos
        return self.raw(n), p

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def tagged_fields(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out


def parse_fetch_response(body: bytes, version: int, *, base: int = 0,
                         what: str = "fetch response") -> FetchResponse:
    """Parse a Fetch response body (no size or correlation id) of `version` 0..16.

    `base` is added to every reported position (where the body starts in its file). Raises
    VectorFormatError when the body is short; trailing bytes are reported through `size`.
    """
    if not 0 <= version <= 16:
        raise VectorFormatError(f"{what}: unsupported Fetch version {version}")
    flexible = version >= 12
    r = _Reader(body, what=what)
    throttle = r.int32() if version >= 1 else None
    error_code = session_id = None
    if version >= 7:
        error_code = r.int16()
        session_id = r.int32()
    topics = []
    for _ in range(max(r.array_len(flexible), 0)):
        topic_name = topic_id = None
        if version >= 13:
            topic_id = r.raw(16)
        else:
            topic_name = r.compact_string() if flexible else r.string()
        parts = []
        for _ in range(max(r.array_len(flexible), 0)):
            parts.append(_fetch_partition(r, version, flexible, base))
        if flexible:
            r.tagged_fields()
        topics.append(FetchTopic(topic_name, topic_id, tuple(parts)))
    if flexible:
        r.tagged_fields()
    return FetchResponse(version, throttle, error_code, session_id, tuple(topics), r.pos)


def _fetch_partition(r: _Reader, version: int, flexible: bool, base: int) -> FetchPartition:
    partition = r.int32()
    error_code = r.int16()
    hw = r.int64()
    lso = r.int64() if version >= 4 else None
    log_start = r.int64() if version >= 5 else None
    aborted = None
    if version >= 4:
        n = r.array_len(flexible)
        if n >= 0:
            txns = []
            for _ in range(n):
                txns.append(AbortedTransaction(r.int64(), r.int64()))
                if flexible:
                    r.tagged_fields()
            aborted = tuple(txns)
    preferred = r.int32() if version >= 11 else None
    records, pos = r.compact_bytes() if flexible else r.bytes_field()
    tags = r.tagged_fields() if flexible else {}
    return FetchPartition(partition, error_code, hw, lso, log_start, aborted, preferred,
                          records, base + pos, tags)


def parse_produce_request(body: bytes, version: int, *, base: int = 0,
                          what: str = "produce request") -> ProduceRequest:
    """Parse a non-flexible Produce request body (v0..v8, no request header)."""
    if not 0 <= version <= 8:
        raise VectorFormatError(f"{what}: unsupported Produce version {version}")
    r = _Reader(body, what=what)
    txn_id = r.nullable_string() if version >= 3 else None
    acks = r.int16()
    timeout = r.int32()
    topics = []
    for _ in range(max(r.int32(), 0)):
        name = r.string()
        parts = []
        for _ in range(max(r.int32(), 0)):
            index = r.int32()
            records, pos = r.bytes_field()
            parts.append(ProducePartition(index, records, base + pos))
        topics.append((name, tuple(parts)))
    return ProduceRequest(version, txn_id, acks, timeout, tuple(topics), r.pos)


# --------------------------------------------------------------------------------------------
# Synthesized frames

def encode_varint(value: int) -> bytes:
    """Zig-zag varint (Kafka's varint/varlong)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def crc32c(data: bytes) -> int:
    """CRC-32C from the `crc32c` test dependency (independent of the engine's own CRC)."""
    import crc32c as _crc32c
    return _crc32c.crc32c(data)


def wrap_legacy_message(message: bytes, offset: int = 0) -> bytes:
    """Put the 12-byte log overhead (offset int64, size int32) in front of a legacy message."""
    return struct.pack(">qi", offset, len(message)) + message


def batch_from_crc_payload(payload: bytes, crc: int, *, base_offset: int = 0,
                           partition_leader_epoch: int = 0) -> bytes:
    """A whole v2 batch from its CRC-covered tail ([attributes, end)) and a stated CRC."""
    batch_length = 4 + 1 + 4 + len(payload)  # leader epoch + magic + crc + payload
    header = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc)
    return header + payload


def wrap_record_body_in_batch(body: bytes, *, base_offset: int = 0,
                              base_timestamp: int = 0) -> bytes:
    """A one-record, uncompressed CreateTime v2 batch around a record body (the record without
    its length varint). base_timestamp is written as both base and max timestamp (the body's
    timestamp delta is not read); producer id, epoch and base sequence are -1."""
    records = encode_varint(len(body)) + body
    tail = struct.pack(">hiqqqhii", 0, 0, base_timestamp, base_timestamp, -1, -1, -1, 1) + records
    return batch_from_crc_payload(tail, crc32c(tail), base_offset=base_offset)


# --------------------------------------------------------------------------------------------
# Loading

def load_blobs(relpath: str) -> list[RecordsBlob]:
    """Every records blob of one vector file, in file order (one per fetch/produce partition).

    Raises VectorFormatError if the file is not of a records kind or its framing is wrong
    (e.g. a fetch body not consumed exactly, or a size prefix that disagrees with the file).
    """
    kind, info = kind_of(relpath)
    data = read_vector_bytes(relpath)
    if kind == "records":
        if info.get("prefix") == "size":
            (size,) = struct.unpack_from(">i", data, 0)
            if size != len(data) - 4:
                raise VectorFormatError(f"{relpath}: size prefix {size}, file has {len(data) - 4}")
            return [RecordsBlob(relpath, kind, data[4:], 4)]
        return [RecordsBlob(relpath, kind, data, 0)]
    if kind == "legacy-message":
        return [RecordsBlob(relpath, kind, wrap_legacy_message(data), 0,
                            synthetic_prefix=LOG_OVERHEAD,
                            note="legacy message given offset 0 and its size")]
    if kind == "record-body":
        batch = wrap_record_body_in_batch(data)
        return [RecordsBlob(relpath, kind, batch, 0,
                            synthetic_prefix=len(batch) - len(data),
                            note="record body wrapped in a one-record v2 batch")]
    if kind == "crc-payload":
        batch = batch_from_crc_payload(data, info["crc"])
        return [RecordsBlob(relpath, kind, batch, 0, synthetic_prefix=len(batch) - len(data),
                            note="v2 batch header (stated CRC) put before the CRC payload")]
    if kind == "fetch-response":
        return _fetch_blobs(relpath, data, info)
    if kind == "produce-request":
        req = parse_produce_request(data, info["version"], what=relpath)
        if req.size != len(data):
            raise VectorFormatError(f"{relpath}: produce body is {len(data)} bytes, "
                                    f"parsed {req.size}")
        return [RecordsBlob(relpath, kind, p.records or b"", p.records_position, topic=name,
                            partition=p.partition, produce_version=req.version)
                for name, parts in req.topics for p in parts]
    raise VectorFormatError(f"{relpath}: kind {kind} holds no records blob")


def _fetch_blobs(relpath: str, data: bytes, info: dict) -> list[RecordsBlob]:
    prefix = info["prefix"]
    corr = None
    if prefix == "size+corr":
        size, corr = struct.unpack_from(">ii", data, 0)
        if size != len(data) - 4:
            raise VectorFormatError(f"{relpath}: size field {size}, file has {len(data) - 4}")
        start = 8
    elif prefix == "corr":
        (corr,) = struct.unpack_from(">i", data, 0)
        start = 4
    else:
        start = 0
    body = data[start:]
    resp = parse_fetch_response(body, info["version"], base=start, what=relpath)
    if resp.size != len(body):
        raise VectorFormatError(f"{relpath}: fetch v{info['version']} body is {len(body)} "
                                f"bytes, parsed {resp.size}")
    out = []
    for t in resp.topics:
        for p in t.partitions:
            out.append(RecordsBlob(relpath, "fetch-response", p.records or b"",
                                   p.records_position, topic=t.topic, partition=p.partition,
                                   fetch_version=resp.version, correlation_id=corr,
                                   fetch_partition=p))
    return out


def load_fetch_response(relpath: str) -> FetchResponse:
    """The parsed Fetch response of a fetch-response vector file (prefix removed)."""
    kind, info = kind_of(relpath)
    if kind != "fetch-response":
        raise VectorFormatError(f"{relpath} is not a fetch response ({kind})")
    data = read_vector_bytes(relpath)
    start = {"none": 0, "corr": 4, "size+corr": 8}[info["prefix"]]
    return parse_fetch_response(data[start:], info["version"], base=start, what=relpath)


def load_blob(relpath: str, topic: str | None = None, partition: int | None = None) -> RecordsBlob:
    """The single blob of a file (or the one for topic/partition); raises if not exactly one."""
    blobs = [b for b in load_blobs(relpath)
             if (topic is None or b.topic == topic)
             and (partition is None or b.partition == partition)]
    if len(blobs) != 1:
        raise VectorFormatError(f"{relpath}: {len(blobs)} blobs match topic={topic} "
                                f"partition={partition}")
    return blobs[0]


def all_blobs() -> list[RecordsBlob]:
    """Every records blob of every record vector file."""
    return [b for p in record_vector_files() for b in load_blobs(p)]


# --------------------------------------------------------------------------------------------
# Framing only (no decoding): used to check the helper's blobs, never as a records decoder

@dataclass(frozen=True)
class EntrySpan:
    position: int
    size: int          # 12 + size field
    magic: int
    offset: int        # the first int64: offset (v0/v1) or baseOffset (v2)


@dataclass(frozen=True)
class FramingScan:
    entries: tuple[EntrySpan, ...]
    valid_bytes: int
    partial_bytes: int


def scan_entry_framing(blob: bytes) -> FramingScan:
    """Walk the common 17-byte entry framing (Kafka's ByteBufferLogInputStream): whole
    entries, then the trailing rest.

    Only sizes are read; nothing is checked or decoded. A trailing entry shorter than its size
    field says (or shorter than 17 bytes) ends the walk and is counted in partial_bytes.
    """
    pos = 0
    entries = []
    while len(blob) - pos >= HEADER_SIZE_UP_TO_MAGIC:
        offset, size = struct.unpack_from(">qi", blob, pos)
        total = LOG_OVERHEAD + size
        if size < 0 or pos + total > len(blob):
            break
        entries.append(EntrySpan(pos, total, blob[pos + MAGIC_OFFSET], offset))
        pos += total
    return FramingScan(tuple(entries), pos, len(blob) - pos)


def xerial_snappy_chunks(stream: bytes) -> list[bytes]:
    """Split a xerial snappy-java stream (16-byte header, then [int32 length][raw block]...)
    into its raw snappy blocks. Raises VectorFormatError on a bad header or a short chunk."""
    header = b"\x82SNAPPY\x00"
    if not stream.startswith(header) or len(stream) < 16:
        raise VectorFormatError("not a xerial snappy stream")
    pos, chunks = 16, []
    while pos < len(stream):
        if pos + 4 > len(stream):
            raise VectorFormatError(f"xerial chunk length cut at {pos}")
        (n,) = struct.unpack_from(">i", stream, pos)
        if n < 0 or pos + 4 + n > len(stream):
            raise VectorFormatError(f"xerial chunk at {pos} claims {n} bytes")
        chunks.append(stream[pos + 4:pos + 4 + n])
        pos += 4 + n
    return chunks
