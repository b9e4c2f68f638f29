"""Round trips with the peers: kafka-python (pure Python) and aiokafka (its compiled reader).

(a) Batches the peers build (v2 with every codec, headers, null/empty keys and values, values
    up to 1 MiB, producer state; legacy magic 0 and 1 with gzip/snappy/lz4 wrappers and
    LogAppendTime on v1) decode identically in the engine: every field of every batch and
    record, through the Record path and through the columnar path.
(b) Batches the engine builds (every codec, headers, control and transaction markers,
    LogAppendTime, producer state) decode identically in both peers, whose CRC checks pass.

Where a broker would rewrite a produced batch (base offset, partition leader epoch,
LogAppendTime, the wrapper offset of a legacy compressed message set) the test does the
same to the peer's bytes, recomputing the CRC when the rewritten field is covered by it.
A peer that cannot do something (a codec it lacks) is asserted to refuse, never skipped.
"""

from __future__ import annotations

import random
import struct
import zlib

import aiokafka.codec as ak_codec
import aiokafka.record.default_records as ak_default
import aiokafka.record.legacy_records as ak_legacy
import aiokafka.record.memory_records as ak_memory
import crc32c
import kafka.codec as kp_codec
import kafka.record.default_records as kp_default
import kafka.record.legacy_records as kp_legacy
import kafka.record.memory_records as kp_memory
import pytest
from aiokafka.errors import UnsupportedCodecError as AkUnsupportedCodecError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.errors import UnsupportedCodecError as KpUnsupportedCodecError

from engine.records import (
    CompressionType,
    ControlRecordType,
    MemoryRecords,
    RecordBatchBuilder,
    TimestampType,
    build_control_batch,
    build_end_txn_marker,
    parse_control_record,
    scan_batches,
)

CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
          CompressionType.LZ4, CompressionType.ZSTD]
LEGACY_CODECS = CODECS[:4]  # zstd is not allowed for magic 0/1
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
MAX_INT32 = 2**31 - 1
BIG = 1 << 30  # builder batch_size: never refuse a record

PEER_SETTINGS = settings(max_examples=25, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.data_too_large])


# ---- data ------------------------------------------------------------------------------

_WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"order", b"user", b"price", b"status",
          b"shipped", b"pending", b"eu-west-1", b"us-east-2", b"null", b"true", b"false"]


def semi_compressible(rng: random.Random, size: int) -> bytes:
    """JSON-ish text with random fields: compresses, but not to nothing."""
    out = bytearray()
    while len(out) < size:
        out += b'{"%s":%d,"%s":"%s","id":"%08x"},' % (
            rng.choice(_WORDS), rng.randrange(10**6), rng.choice(_WORDS),
            rng.choice(_WORDS), rng.getrandbits(32))
    return bytes(out[:size])


def _has_codec(codec_module, codec: int) -> bool:
    if codec == 0:
        return True
    return getattr(codec_module, "has_" + CODEC_NAMES[codec])()


# ---- peer builders (v2) ----------------------------------------------------------------

def _broker_stamp_v2(buf: bytearray, base_offset: int, leader_epoch: int,
                     log_append_time: int | None) -> bytes:
    """What a leader does on append: base offset and partition leader epoch (outside the
    CRC) and, for LogAppendTime topics, the timestamp-type bit and max timestamp (inside)."""
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    if log_append_time is not None:
        attrs = struct.unpack_from(">h", buf, 21)[0] | 0x08
        struct.pack_into(">h", buf, 21, attrs)
        struct.pack_into(">q", buf, 35, log_append_time)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def build_v2_with_peer(peer: str, records: list[dict], codec: int, *, producer_id=-1,
                       producer_epoch=-1, base_sequence=-1, is_transactional=False,
                       base_offset=0, leader_epoch=0, log_append_time=None) -> bytes:
    """One v2 batch written by a peer's producer-side builder. `records` hold offset_delta,
    timestamp, key, value, headers."""
    if peer == "kafka-python":
        b = kp_default.DefaultRecordBatchBuilder(
            magic=2, compression_type=codec, is_transactional=is_transactional,
            producer_id=producer_id, producer_epoch=producer_epoch,
            base_sequence=base_sequence, batch_size=BIG)
    else:
        b = ak_default.DefaultRecordBatchBuilder(
            2, codec, int(is_transactional), producer_id, producer_epoch, base_sequence, BIG)
    for r in records:
        meta = b.append(r["offset_delta"], r["timestamp"], r["key"], r["value"],
                        list(r["headers"]))
        assert meta is not None
    return _broker_stamp_v2(bytearray(b.build()), base_offset, leader_epoch, log_append_time)


# ---- legacy (magic 0/1) builders -------------------------------------------------------

def _legacy_crc(buf: bytearray, pos: int) -> None:
    size = struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16:pos + 12 + size])))


def build_legacy_with_peer(peer: str, magic: int, codec: int, records: list[dict], *,
                           base_offset: int, log_append_time: int | None = None,
                           wrapper_offset: str = "last") -> bytes:
    """A legacy message set from a peer's LegacyRecordBatchBuilder, stamped as a broker
    would: absolute offsets (v0 inner and uncompressed), v1 relative inner offsets with the
    wrapper at the last absolute offset (or 0, as old librdkafka left it, when
    `wrapper_offset == "zero"`), LogAppendTime (v1) on every outer message."""
    mod = kp_legacy if peer == "kafka-python" else ak_legacy
    b = mod.LegacyRecordBatchBuilder(magic, codec, BIG)
    relative = magic == 1 and codec != 0
    for i, r in enumerate(records):
        off = i if relative else base_offset + i
        assert b.append(off, r["timestamp"], r["key"], r["value"]) is not None
    buf = bytearray(b.build())
    n = len(records)
    if codec != 0:
        if wrapper_offset == "last":
            struct.pack_into(">q", buf, 0, base_offset + n - 1)
        else:
            struct.pack_into(">q", buf, 0, 0)
    if log_append_time is not None:
        assert magic == 1
        pos = 0
        while pos < len(buf):
            buf[pos + 17] |= 0x08
            struct.pack_into(">q", buf, pos + 18, log_append_time)
            _legacy_crc(buf, pos)
            pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    return bytes(buf)


# ---- readers: engine and peers, normalized to plain tuples ---------------------------

def _hdrs(headers) -> tuple:
    return tuple((k, v) for k, v in headers)


def engine_record_rows(buf: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, _hdrs(r.headers))
            for r in MemoryRecords(buf).records()]


def engine_column_rows(buf: bytes) -> list[tuple]:
    """The copied columns' rows, after checking the view columns give the same rows."""
    cols = MemoryRecords(buf).decode_columns()
    rows = [(d["offset"], d["timestamp"], d["timestamp_type"], d["key"], d["value"],
             _hdrs(d["headers"])) for d in cols.to_pylist()]
    assert len(cols) == len(rows)
    assert MemoryRecords(buf).decode_columns(views=True).to_pylist() == cols.to_pylist()
    return rows


def peer_batches(peer: str, buf: bytes) -> list:
    mod = kp_memory if peer == "kafka-python" else ak_memory
    m = mod.MemoryRecords(bytes(buf))
    out = []
    while m.has_next():
        out.append(m.next_batch())
    return out


def peer_record_rows(peer: str, buf: bytes, *, check_crc: bool = True) -> list[tuple]:
    rows = []
    for batch in peer_batches(peer, buf):
        if check_crc:
            assert batch.validate_crc(), f"{peer} rejects the CRC of {batch!r}"
        for r in batch:
            ts = -1 if r.timestamp is None else r.timestamp
            tt = -1 if r.timestamp_type is None else r.timestamp_type
            rows.append((r.offset, ts, tt, r.key, r.value, _hdrs(r.headers)))
    return rows


def expected_v2_rows(records, base_offset, log_append_time) -> list[tuple]:
    rows = []
    for r in records:
        lat = log_append_time is not None
        rows.append((base_offset + r["offset_delta"], log_append_time if lat else r["timestamp"],
                     1 if lat else 0, r["key"], r["value"], _hdrs(r["headers"])))
    return rows


def expected_sequence(base_sequence: int, delta: int) -> int:
    if base_sequence < 0:
        return -1
    if base_sequence > MAX_INT32 - delta:
        return delta - (MAX_INT32 - base_sequence) - 1
    return base_sequence + delta


def assert_engine_matches_v2(buf: bytes, records: list[dict], *, codec: int, base_offset: int,
                             leader_epoch: int, producer_id: int, producer_epoch: int,
                             base_sequence: int, is_transactional: bool,
                             log_append_time: int | None, peer: str):
    """Every batch and record field of one peer-built v2 batch, in the engine."""
    scan = scan_batches(buf, verify_crc=True)
    assert len(scan) == 1 and scan.partial_bytes == 0
    row = scan.headers[0]
    assert bool(row["crc_valid"])
    MemoryRecords(buf).validate()

    # what the peer itself says about the batch (kafka-python may fall back to no codec)
    (pb,) = peer_batches("kafka-python", buf)
    (batch,) = MemoryRecords(buf).batches()
    assert int(batch.compression_type) == pb.compression_type
    if peer == "aiokafka" or codec == 0:
        assert pb.compression_type == codec  # aiokafka always compresses
    assert batch.magic == 2
    assert batch.base_offset == base_offset
    assert batch.last_offset == base_offset + records[-1]["offset_delta"]
    assert batch.next_offset == batch.last_offset + 1
    assert batch.partition_leader_epoch == leader_epoch
    assert batch.crc == pb.crc
    assert batch.is_valid()
    assert batch.producer_id == producer_id
    assert batch.producer_epoch == producer_epoch
    assert batch.base_sequence == base_sequence
    assert batch.last_sequence == expected_sequence(base_sequence,
                                                    records[-1]["offset_delta"])
    assert batch.is_transactional == is_transactional
    assert batch.is_control is False
    assert batch.record_count == len(records)
    assert batch.base_timestamp == records[0]["timestamp"]
    assert batch.max_timestamp == (log_append_time if log_append_time is not None
                                   else max(r["timestamp"] for r in records))
    assert batch.timestamp_type == (TimestampType.LOG_APPEND_TIME
                                    if log_append_time is not None
                                    else TimestampType.CREATE_TIME)
    assert batch.size_in_bytes == len(buf)

    # records: engine vs the input, vs both peers, and columns vs records
    want = expected_v2_rows(records, base_offset, log_append_time)
    got = engine_record_rows(buf)
    assert got == want
    assert engine_column_rows(buf) == want
    assert peer_record_rows("kafka-python", buf) == want
    assert peer_record_rows("aiokafka", buf) == want
    recs = batch.records()
    assert [r.sequence for r in recs] == [expected_sequence(base_sequence, r["offset_delta"])
                                         for r in records]
    assert all(r.is_control is False for r in recs)


# ---- peers are what we think they are --------------------------------------------------

def test_aiokafka_reader_is_the_compiled_one():
    for cls in (ak_default.DefaultRecordBatch, ak_default.DefaultRecordBatchBuilder,
                ak_legacy.LegacyRecordBatch, ak_legacy.LegacyRecordBatchBuilder,
                ak_memory.MemoryRecords):
        assert cls.__module__.startswith("aiokafka.record._crecords."), cls


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: CODEC_NAMES[c])
@pytest.mark.parametrize("peer,codec_module", [("kafka-python", kp_codec),
                                              ("aiokafka", ak_codec)])
def test_peer_codec_support_is_explicit(peer, codec_module, codec):
    """Each peer either has the codec (then every round trip below covers it) or refuses
    to build with it: there is no silent skip."""
    records = [dict(offset_delta=0, timestamp=1, key=None, value=b"x" * 200, headers=())]
    if _has_codec(codec_module, codec):
        buf = build_v2_with_peer(peer, records, codec)
        assert engine_record_rows(buf) == expected_v2_rows(records, 0, None)
    else:
        with pytest.raises((KpUnsupportedCodecError, AkUnsupportedCodecError)):
            build_v2_with_peer(peer, records, codec)


# ---- (a) peer-built v2 batches in the engine -------------------------------------------

PEERS = ["kafka-python", "aiokafka"]


def _fixed_records(rng: random.Random, sizes: list[int]) -> list[dict]:
    recs = []
    ts = 1_700_000_000_000
    for i, size in enumerate(sizes):
        recs.append(dict(
            offset_delta=i, timestamp=ts + rng.randrange(-5, 50),
            key=[None, b"", b"key-%d" % i][i % 3],
            value=None if size < 0 else semi_compressible(rng, size),
            headers=[(), (("trace", b"t-%d" % i),),
                     (("a", None), ("", b""), ("é-ü", b"\x00\xff"))][i % 3]))
    return recs


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
@pytest.mark.parametrize("peer", PEERS)
def test_peer_v2_fixed_shapes(peer, codec):
    """Null / empty keys and values, headers with null values and empty keys, varint size
    boundaries, values from 0 bytes up to 1 MiB, producer state, a leader epoch."""
    rng = random.Random(codec * 7 + len(peer))
    sizes = [-1, 0, 1, 63, 64, 127, 128, 300, 1000, 8191, 8192, 16383, 16384, 70_000,
             1 << 20]
    records = _fixed_records(rng, sizes)
    state = dict(producer_id=123_456_789_012, producer_epoch=7, base_sequence=1000,
                 is_transactional=True)
    buf = build_v2_with_peer(peer, records, codec, base_offset=9_000_000_000,
                             leader_epoch=42, **state)
    assert_engine_matches_v2(buf, records, codec=codec, base_offset=9_000_000_000,
                             leader_epoch=42, log_append_time=None, peer=peer, **state)
    (pb,) = peer_batches("kafka-python", buf)
    assert pb.compression_type == codec  # compressible data: the codec is really exercised


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
@pytest.mark.parametrize("peer", PEERS)
def test_peer_v2_log_append_time_and_sequence_wrap(peer, codec):
    rng = random.Random(99)
    records = [dict(offset_delta=d, timestamp=1_600_000_000_000 - 3 * d,
                    key=b"k", value=semi_compressible(rng, 200), headers=(("h", None),))
               for d in (0, 1, 2, 5, 6)]  # offset gaps (a compacted producer batch)
    state = dict(producer_id=5, producer_epoch=0, base_sequence=MAX_INT32 - 2,
                 is_transactional=False)
    buf = build_v2_with_peer(peer, records, codec, base_offset=77, leader_epoch=3,
                             log_append_time=1_700_000_123_456, **state)
    assert_engine_matches_v2(buf, records, codec=codec, base_offset=77, leader_epoch=3,
                             log_append_time=1_700_000_123_456, peer=peer, **state)
    (batch,) = MemoryRecords(buf).batches()
    assert batch.last_sequence == 3  # MAX_INT32 - 2 + 6 wraps past 2**31 - 1 to 0


@pytest.mark.parametrize("peer", PEERS)
def test_peer_v2_idempotent_not_transactional_and_plain(peer):
    records = _fixed_records(random.Random(5), [10, 20, -1])
    for state in (dict(producer_id=-1, producer_epoch=-1, base_sequence=-1,
                       is_transactional=False),
                  dict(producer_id=1, producer_epoch=32767, base_sequence=0,
                       is_transactional=False)):
        buf = build_v2_with_peer(peer, records, 0, base_offset=0, leader_epoch=-1, **state)
        assert_engine_matches_v2(buf, records, codec=0, base_offset=0, leader_epoch=-1,
                                 log_append_time=None, peer=peer, **state)


header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record_st = st.fixed_dictionaries(dict(
    gap=st.integers(0, 3),
    ts_delta=st.integers(-10**6, 10**9),
    key=st.one_of(st.none(), st.binary(max_size=24), st.sampled_from([b"", b"user-1"])),
    value=st.one_of(st.none(), st.binary(max_size=200),
                    st.integers(0, 3000).map(lambda n: semi_compressible(random.Random(n), n))),
    headers=st.lists(header_st, max_size=3),
))


def _materialize(raw: list[dict], first_ts: int) -> list[dict]:
    recs, delta = [], 0
    for i, r in enumerate(raw):
        delta += r["gap"] if i else 0
        recs.append(dict(offset_delta=delta, timestamp=first_ts + (r["ts_delta"] if i else 0),
                         key=r["key"], value=r["value"], headers=tuple(r["headers"])))
        delta += 1
    return recs


@PEER_SETTINGS
@given(peer=st.sampled_from(PEERS), codec=st.sampled_from(CODECS),
       raw=st.lists(record_st, min_size=1, max_size=25),
       first_ts=st.integers(0, 2**42), base_offset=st.integers(0, 2**62),
       leader_epoch=st.integers(-1, MAX_INT32),
       producer=st.one_of(
           st.just((-1, -1, -1, False)),
           st.tuples(st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, MAX_INT32),
                     st.booleans())),
       lat=st.one_of(st.none(), st.integers(0, 2**42)))
def test_peer_v2_generated(peer, codec, raw, first_ts, base_offset, leader_epoch, producer,
                           lat):
    records = _materialize(raw, first_ts)
    pid, epoch, seq, txn = producer
    state = dict(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                 is_transactional=txn)
    buf = build_v2_with_peer(peer, records, codec, base_offset=base_offset,
                             leader_epoch=leader_epoch, log_append_time=lat, **state)
    assert_engine_matches_v2(buf, records, codec=codec, base_offset=base_offset,
                             leader_epoch=leader_epoch, log_append_time=lat, peer=peer, **state)


@pytest.mark.parametrize("peer", PEERS)
def test_peer_v2_many_batches_in_one_buffer(peer):
    """A segment-like run: several batches of different codecs back to back."""
    rng = random.Random(11)
    bufs, want, offset = [], [], 1000
    for i in range(10):
        codec = CODECS[i % 5]
        records = _fixed_records(rng, [rng.randrange(0, 600) for _ in range(7)])
        bufs.append(build_v2_with_peer(peer, records, codec, base_offset=offset,
                                       leader_epoch=i))
        want += expected_v2_rows(records, offset, None)
        offset += len(records)
    buf = b"".join(bufs)
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want
    assert peer_record_rows("kafka-python", buf) == want
    scan = scan_batches(buf)
    assert len(scan) == 10 and scan.headers["crc_valid"].all()
    # a trailing partial batch is left out, as the peers (and Kafka) do
    torn = buf + bufs[0][:40]
    assert engine_record_rows(torn) == want
    assert scan_batches(torn).partial_bytes == 40
    assert peer_record_rows("aiokafka", torn) == want


# ---- (a) legacy magic 0 and 1 ----------------------------------------------------------

def _legacy_records(rng: random.Random, n: int, first_ts: int) -> list[dict]:
    return [dict(timestamp=first_ts + i * 3,
                 key=[None, b"", b"lk-%d" % i][i % 3],
                 value=[None, b"", semi_compressible(rng, rng.randrange(1, 2000))][(i + 1) % 3])
            for i in range(n)]


def expected_legacy_rows(magic, records, base_offset, lat) -> list[tuple]:
    rows = []
    for i, r in enumerate(records):
        if magic == 0:
            ts, tt = -1, -1
        elif lat is not None:
            ts, tt = lat, 1
        else:
            ts, tt = r["timestamp"], 0
        rows.append((base_offset + i, ts, tt, r["key"], r["value"], ()))
    return rows


LEGACY_CASES = [(m, c, lat) for m in (0, 1) for c in LEGACY_CODECS
                for lat in ((None,) if m == 0 else (None, 1_650_000_000_000))]


@pytest.mark.parametrize("magic,codec,lat", LEGACY_CASES,
                         ids=[f"v{m}-{CODEC_NAMES[c]}-{'lat' if lat else 'ct'}"
                              for m, c, lat in LEGACY_CASES])
@pytest.mark.parametrize("peer", PEERS)
def test_peer_legacy(peer, magic, codec, lat):
    codec_module = kp_codec if peer == "kafka-python" else ak_codec
    assert _has_codec(codec_module, codec), f"{peer} lacks {CODEC_NAMES[codec]}"
    rng = random.Random(magic * 10 + codec)
    records = _legacy_records(rng, 9, 1_600_000_000_000)
    base = 5_000_000_000
    if peer == "aiokafka" and magic == 0 and codec == CompressionType.LZ4:
        # aiokafka refuses to write LZ4 with magic 0 (broker 0.8/0.9 never had it);
        # kafka-python writes it (with the old buggy frame checksum), covered below
        with pytest.raises(AkUnsupportedCodecError):
            build_legacy_with_peer(peer, magic, codec, records, base_offset=base)
        return
    buf = build_legacy_with_peer(peer, magic, codec, records, base_offset=base,
                                 log_append_time=lat)
    want = expected_legacy_rows(magic, records, base, lat)

    scan = scan_batches(buf, verify_crc=True)
    assert scan.headers["crc_valid"].all() and scan.partial_bytes == 0
    MemoryRecords(buf).validate()
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want
    assert peer_record_rows("kafka-python", buf) == want
    if magic == 0 and codec == CompressionType.LZ4:
        with pytest.raises(AkUnsupportedCodecError):  # aiokafka cannot read v0 LZ4 either
            peer_record_rows("aiokafka", buf)
    else:
        assert peer_record_rows("aiokafka", buf) == want

    batches = list(MemoryRecords(buf).batches())
    assert len(batches) == (1 if codec else len(records))
    for b in batches:
        assert b.magic == magic
        assert int(b.compression_type) == codec
        assert b.is_valid()
        assert int(b.timestamp_type) == (-1 if magic == 0 else (1 if lat else 0))
        assert b.is_transactional is False and b.is_control is False
        assert b.producer_id == -1 and b.producer_epoch == -1 and b.base_sequence == -1
    assert batches[0].base_offset == base
    assert batches[-1].last_offset == base + len(records) - 1
    if codec:
        assert batches[0].record_count == len(records)
    assert all(r.sequence == -1 and not r.is_control for r in MemoryRecords(buf).records())


@pytest.mark.parametrize("codec", LEGACY_CODECS[1:], ids=lambda c: CODEC_NAMES[c])
def test_peer_legacy_v1_wrapper_offset_zero(codec):
    """Old clients left a v1 wrapper at offset 0: inner relative offsets are then used as
    they are (kafka-python and Kafka agree)."""
    records = _legacy_records(random.Random(3), 4, 1000)
    buf = build_legacy_with_peer("kafka-python", 1, codec, records, base_offset=0,
                                 wrapper_offset="zero")
    want = expected_legacy_rows(1, records, 0, None)
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want
    assert peer_record_rows("kafka-python", buf) == want


def test_peer_legacy_mixed_with_v2():
    """A log written across a message-format upgrade: v0, v1, then v2 batches."""
    rng = random.Random(8)
    r0, r1 = _legacy_records(rng, 3, 10), _legacy_records(rng, 3, 20)
    v2 = _fixed_records(rng, [5, 50, 500])
    buf = (build_legacy_with_peer("kafka-python", 0, 1, r0, base_offset=0)
           + build_legacy_with_peer("kafka-python", 1, 3, r1, base_offset=3)
           + build_v2_with_peer("aiokafka", v2, 4, base_offset=6))
    want = (expected_legacy_rows(0, r0, 0, None) + expected_legacy_rows(1, r1, 3, None)
            + expected_v2_rows(v2, 6, None))
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want
    assert peer_record_rows("kafka-python", buf) == want


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(peer=st.sampled_from(PEERS), magic=st.sampled_from([0, 1]),
       codec=st.sampled_from(LEGACY_CODECS),
       raw=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=30)),
                              st.one_of(st.none(), st.binary(max_size=300))),
                    min_size=1, max_size=12),
       base=st.integers(0, 2**60), first_ts=st.integers(0, 2**42),
       lat=st.one_of(st.none(), st.integers(0, 2**42)))
def test_peer_legacy_generated(peer, magic, codec, raw, base, first_ts, lat):
    if magic == 0:
        lat = None
        if peer == "aiokafka" and codec == CompressionType.LZ4:
            peer = "kafka-python"  # aiokafka refuses v0 LZ4 (asserted in test_peer_legacy)
    records = [dict(timestamp=first_ts + i, key=k, value=v) for i, (k, v) in enumerate(raw)]
    buf = build_legacy_with_peer(peer, magic, codec, records, base_offset=base,
                                 log_append_time=lat)
    want = expected_legacy_rows(magic, records, base, lat)
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want
    assert peer_record_rows("kafka-python", buf) == want


# ---- (b) engine-built batches in the peers ---------------------------------------------

def engine_build(records: list[dict], codec: int, **opts) -> bytes:
    b = RecordBatchBuilder(compression_type=codec, **opts)
    base = opts.get("base_offset", 0)
    for r in records:
        b.append(r["value"], key=r["key"], headers=r["headers"], timestamp=r["timestamp"],
                 offset=base + r["offset_delta"])
    return b.build()


def assert_peers_read_engine_batch(buf: bytes, records: list[dict], *, codec: int,
                                   base_offset: int, producer_id: int, producer_epoch: int,
                                   base_sequence: int, is_transactional: bool,
                                   log_append_time: int | None, leader_epoch: int,
                                   is_control: bool = False):
    want = expected_v2_rows(records, base_offset, log_append_time)
    for peer in PEERS:
        (pb,) = peer_batches(peer, buf)
        assert pb.validate_crc(), f"{peer} rejects the engine's CRC"
        assert pb.magic == 2
        assert pb.base_offset == base_offset
        assert pb.compression_type == codec
        assert pb.timestamp_type == (0 if log_append_time is None else 1)
        assert pb.is_transactional == is_transactional
        assert pb.is_control_batch == is_control
        assert pb.producer_id == producer_id
        assert pb.producer_epoch == producer_epoch
        assert pb.base_sequence == base_sequence
        assert pb.first_timestamp == records[0]["timestamp"]
        assert pb.max_timestamp == (log_append_time if log_append_time is not None
                                    else max(r["timestamp"] for r in records))
        assert pb.last_offset_delta == records[-1]["offset_delta"]
        assert pb.next_offset == base_offset + records[-1]["offset_delta"] + 1
        if peer == "kafka-python":
            assert pb.leader_epoch == leader_epoch
            assert pb.records_count == len(records)
            assert pb.size_in_bytes == len(buf)
            assert pb.last_sequence == expected_sequence(base_sequence,
                                                         records[-1]["offset_delta"])
        assert peer_record_rows(peer, buf) == want
    # and the engine reads its own bytes the same way
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_engine_v2_fixed_shapes_in_peers(codec):
    rng = random.Random(codec)
    sizes = [-1, 0, 1, 127, 128, 1000, 16383, 16384, 100_000, 1 << 20]
    records = _fixed_records(rng, sizes)
    opts = dict(base_offset=123_456_789, producer_id=42, producer_epoch=3,
                base_sequence=17, is_transactional=True, partition_leader_epoch=12)
    buf = engine_build(records, codec, **opts)
    assert_peers_read_engine_batch(buf, records, codec=codec, base_offset=123_456_789,
                                   producer_id=42, producer_epoch=3, base_sequence=17,
                                   is_transactional=True, log_append_time=None,
                                   leader_epoch=12)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_engine_v2_log_append_time_in_peers(codec):
    rng = random.Random(codec + 100)
    records = [dict(offset_delta=d, timestamp=1_000 + d, key=b"k%d" % d,
                    value=semi_compressible(rng, 400), headers=(("n", None),))
               for d in (0, 2, 3, 9)]
    opts = dict(base_offset=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=1_777_000_000_000)
    buf = engine_build(records, codec, **opts)
    assert_peers_read_engine_batch(buf, records, codec=codec, base_offset=0, producer_id=-1,
                                   producer_epoch=-1, base_sequence=-1, is_transactional=False,
                                   log_append_time=1_777_000_000_000, leader_epoch=-1)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_engine_txn_markers_in_peers(commit):
    buf = build_end_txn_marker(commit, base_offset=555, producer_id=9_000_000_001,
                               producer_epoch=4, coordinator_epoch=27, timestamp=1234,
                               partition_leader_epoch=6)
    for peer in PEERS:
        (pb,) = peer_batches(peer, buf)
        assert pb.validate_crc()
        assert pb.is_control_batch and pb.is_transactional
        assert pb.producer_id == 9_000_000_001 and pb.producer_epoch == 4
        assert pb.base_sequence == -1 and pb.compression_type == 0
        assert pb.timestamp_type == 0
        (rec,) = list(pb)
        assert rec.offset == 555 and rec.timestamp == 1234
        assert rec.key == struct.pack(">hh", 0, 1 if commit else 0)
        assert rec.value == struct.pack(">hi", 0, 27)
        assert list(rec.headers) == []
    (kb,) = peer_batches("kafka-python", buf)
    (krec,) = list(kb)
    assert krec.type == (1 if commit else 0) and krec.version == 0
    assert krec.commit is commit and krec.abort is (not commit)
    (batch,) = MemoryRecords(buf).batches()
    assert batch.is_control and batch.is_transactional and batch.partition_leader_epoch == 6
    (erec,) = batch.records()
    assert erec.is_control and erec.sequence == -1
    parsed = parse_control_record(erec.key, erec.value)
    assert parsed.type == (ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
    assert parsed.coordinator_epoch == 27


def test_engine_control_batch_in_peers():
    """A non-transactional control batch (a KRaft LEADER_CHANGE record)."""
    buf = build_control_batch(ControlRecordType.LEADER_CHANGE, b"\x00\x00\x01",
                              base_offset=8, timestamp=99)
    for peer in PEERS:
        (pb,) = peer_batches(peer, buf)
        assert pb.validate_crc()
        assert pb.is_control_batch and not pb.is_transactional
        (rec,) = list(pb)
        assert rec.offset == 8 and rec.timestamp == 99
        assert rec.key == b"\x00\x00\x00\x02" and rec.value == b"\x00\x00\x01"
    (kb,) = peer_batches("kafka-python", buf)
    (krec,) = list(kb)
    assert krec.type == 2


@PEER_SETTINGS
@given(codec=st.sampled_from(CODECS), raw=st.lists(record_st, min_size=1, max_size=25),
       first_ts=st.integers(0, 2**42), base_offset=st.integers(0, 2**62),
       leader_epoch=st.integers(-1, MAX_INT32),
       producer=st.one_of(
           st.just((-1, -1, -1, False)),
           st.tuples(st.integers(0, 2**62), st.integers(0, 32767), st.integers(0, MAX_INT32),
                     st.booleans())),
       lat=st.one_of(st.none(), st.integers(0, 2**42)))
def test_engine_v2_generated_in_peers(codec, raw, first_ts, base_offset, leader_epoch,
                                      producer, lat):
    records = _materialize(raw, first_ts)
    pid, epoch, seq, txn = producer
    opts = dict(base_offset=base_offset, producer_id=pid, producer_epoch=epoch,
                base_sequence=seq, is_transactional=txn, partition_leader_epoch=leader_epoch)
    if lat is not None:
        opts.update(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=lat)
    buf = engine_build(records, codec, **opts)
    assert_peers_read_engine_batch(buf, records, codec=codec, base_offset=base_offset,
                                   producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                   is_transactional=txn, log_append_time=lat,
                                   leader_epoch=leader_epoch)


def test_engine_segment_with_markers_in_peers():
    """A transactional run as a broker log holds it: data batches of every codec, then a
    COMMIT marker; both peers walk the whole buffer and every CRC checks."""
    rng = random.Random(21)
    parts, want, offset = [], [], 0
    for _i, codec in enumerate(CODECS):
        records = _fixed_records(rng, [rng.randrange(0, 800) for _ in range(5)])
        parts.append(engine_build(records, codec, base_offset=offset, producer_id=77,
                                  producer_epoch=1, base_sequence=offset,
                                  is_transactional=True))
        want += expected_v2_rows(records, offset, None)
        offset += len(records)
    parts.append(build_end_txn_marker(True, base_offset=offset, producer_id=77,
                                      producer_epoch=1, coordinator_epoch=2, timestamp=5))
    want.append((offset, 5, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x02", ()))
    buf = b"".join(parts)
    for peer in PEERS:
        assert peer_record_rows(peer, buf) == want
    assert engine_record_rows(buf) == want
    assert engine_column_rows(buf) == want
    cols = MemoryRecords(buf).decode_columns(include_control=False)
    assert len(cols) == len(want) - 1


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_many_headers_both_ways(codec):
    """More headers than the engine's on-stack header buffer (16) in both directions."""
    headers = tuple((f"h{i}", None if i % 3 == 0 else b"x" * i) for i in range(40))
    records = [dict(offset_delta=0, timestamp=5, key=b"k", value=b"v" * 300, headers=headers),
               dict(offset_delta=1, timestamp=6, key=None, value=None, headers=headers[:17])]
    for peer in PEERS:
        buf = build_v2_with_peer(peer, records, codec, base_offset=3, leader_epoch=1)
        assert_engine_matches_v2(buf, records, codec=codec, base_offset=3, leader_epoch=1,
                                 producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                 is_transactional=False, log_append_time=None, peer=peer)
    buf = engine_build(records, codec, base_offset=3, partition_leader_epoch=1)
    assert_peers_read_engine_batch(buf, records, codec=codec, base_offset=3, producer_id=-1,
                                   producer_epoch=-1, base_sequence=-1, is_transactional=False,
                                   log_append_time=None, leader_epoch=1)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: CODEC_NAMES[c])
def test_empty_batches_both_ways(codec):
    """A batch with no records (what compaction can leave) in both directions."""
    for peer in PEERS:
        if peer == "kafka-python":
            b = kp_default.DefaultRecordBatchBuilder(
                magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                producer_epoch=-1, base_sequence=-1, batch_size=BIG)
        else:
            b = ak_default.DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, BIG)
        buf = bytes(b.build())
        (batch,) = MemoryRecords(buf).batches()
        assert batch.is_valid() and batch.record_count == 0 and batch.records() == []
        assert len(MemoryRecords(buf).decode_columns()) == 0
        if peer == "aiokafka" and codec == CompressionType.SNAPPY:
            # aiokafka writes a bare 16-byte xerial header for no records and cannot read it
            # back (it takes xerial framing only for payloads longer than 16 bytes)
            assert buf[61:] == b"\x82SNAPPY\x00" + bytes([0, 0, 0, 1, 0, 0, 0, 1])
            with pytest.raises(Exception, match="snappy"):
                peer_record_rows(peer, buf)
        else:
            assert peer_record_rows(peer, buf) == []
    # the engine writes an empty batch as Kafka does: no records section, codec none
    buf = RecordBatchBuilder(base_offset=10, compression_type=codec).build()
    assert len(buf) == 61
    for peer in PEERS:
        (pb,) = peer_batches(peer, buf)
        assert pb.validate_crc() and pb.compression_type == 0
        assert list(pb) == []
    assert engine_record_rows(buf) == [] and len(MemoryRecords(buf).decode_columns()) == 0


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: CODEC_NAMES[c])
def test_empty_batch_with_codec_bits_and_no_records_section(codec):
    """A 61-byte batch whose attributes name a codec but whose records count is 0 (and so
    holds no compressed stream at all) has no records: Kafka's DefaultRecordBatch.iterator()
    returns an empty iterator for count() == 0 before it looks at the codec."""
    buf = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", buf, 0, 100, 49, 0, 2, 0, codec, 5, -1, 1000, 7, 1,
                     3, 0)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    buf = bytes(buf)
    (batch,) = MemoryRecords(buf).batches()
    assert batch.is_valid() and batch.record_count == 0
    assert batch.last_offset == 105  # compaction kept the offsets
    assert batch.records() == []
    assert engine_record_rows(buf) == []
    assert len(MemoryRecords(buf).decode_columns()) == 0
