"""Conformance: the engine decodes every records vector exactly as its MANIFEST states.

Vectors live in `<repo>/../shared/vectors` (read-only; never copied into the repo) and are
turned into records blobs by tests/vectors.py. Every vector file that carries records is its
own test id in `test_vector_decodes_as_stated` and `test_vector_crc_validation`; the
expectations below restate the folder MANIFESTs (keys, values, headers, offsets, codecs...)
plus DECODED.txt facts that were re-derived from the bytes with a second, independent
decoder before being written down. Where DECODED.txt and Kafka disagree (LogAppendTime record
timestamps), Kafka's rule is asserted and the difference is noted.

Negative vectors: kafka-python control_batch_data_v2 and kafka-rust invalid_crc (bad CRC ->
CorruptRecordError on validation), kafkajs recordBatch__v0_recordbatch_zstd (valid CRC but a
zstd frame in an "uncompressed" batch -> typed error on decode), truncated fetch responses
(kafkajs partial_messages / index_out_of_range, sarama partial / overflow -> the scan stops at
the partial entry and reports it in partial_bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
import vectors as V

if not V.VECTORS.is_dir():
    pytest.fail(f"conformance vectors not found at {V.VECTORS}", pytrace=False)
import engine.records as records_api
from engine.errors import CorruptRecordError, InvalidRecordError

MemoryRecords = records_api.MemoryRecords
CT = records_api.CompressionType
TT = records_api.TimestampType
CRT = records_api.ControlRecordType
parse_control_record = records_api.parse_control_record

NONE, GZIP, SNAPPY, LZ4, ZSTD = CT.NONE, CT.GZIP, CT.SNAPPY, CT.LZ4, CT.ZSTD
CREATE, APPEND, NO_TS = TT.CREATE_TIME, TT.LOG_APPEND_TIME, TT.NO_TIMESTAMP_TYPE

# ---------------------------------------------------------------------------------------------
# Expectation model


@dataclass(frozen=True)
class B:
    """An expected top-level entry: a v2 batch, or one legacy message (a compressed wrapper
    being one entry). `last` is the last offset (for a legacy message: its offset field);
    `base` defaults to `last` (right for uncompressed legacy messages; give it for v2 batches
    and wrappers). `n` = records it yields (None: not checked). `attrs` = further RecordBatch
    attributes."""
    pos: int
    magic: int
    last: int
    codec: CT = NONE
    base: int | None = None
    n: int | None = 1
    attrs: dict = field(default_factory=dict)


RAISES = "raises a typed error"


@dataclass(frozen=True)
class Exp:
    """What one records blob must decode to.

    records: [(offset, key, value)] in order, or RAISES. batches: every entry, in order, or
    None (then n_batches and spot give the count and some entries by index). timestamps /
    ts_types / headers / sequences: per record, when given. partial: partial_bytes.
    """
    records: list | str
    batches: list[B] | None = None
    n_batches: int | None = None
    spot: dict = field(default_factory=dict)
    timestamps: list | None = None
    ts_types: list | TT | None = None
    headers: list | None = None
    sequences: list | None = None
    partial: int = 0


def kv(offsets, keys, values):
    return list(zip(offsets, keys, values))


EXPECT: dict[str, Exp] = {}       # by RecordsBlob.id
EXPECT_NO_BLOBS = set()           # files that carry no records blob at all (empty fetch)
CRC_NEGATIVE = {                  # blob id -> (position, offset) of the first bad entry
    "kafka-python-literals/test_records__control_batch_data_v2.bin": (0, 0),
    "kafka-rust-test-data/fetch2.mytopic.nocompression.invalid_crc.kafka.0900[my-topic-0]": (0, 0),
}

# ---------------------------------------------------------------------------------------------
# kafka-python-literals: "real live data from Kafka 10/11 brokers" + a hand-made control batch

_KP = "kafka-python-literals/test_records__"
EXPECT[_KP + "record_batch_data_v2.bin"] = Exp(
    records=kv([0, 1, 2, 3, 0], [None] * 5, [b"123", b"", b"", b"123", b"hdr"]),
    batches=[
        B(0, 2, 0, base=0, attrs=dict(partition_leader_epoch=1, record_count=1,
                                      size_in_bytes=71)),
        B(71, 2, 2, base=1, n=2, attrs=dict(partition_leader_epoch=2, record_count=2,
                                            base_timestamp=1503229959532,
                                            max_timestamp=1503229959700)),
        B(147, 2, 3, base=3, attrs=dict(partition_leader_epoch=2)),
        B(218, 2, 0, base=0, attrs=dict(partition_leader_epoch=0, size_in_bytes=81)),
    ],
    timestamps=[1503229838908, 1503229959532, 1503229959700, 1503229962141, 1535546684353],
    ts_types=CREATE,
    headers=[(), (), (), (), (("hkey", b"hval"),)],
    sequences=[-1] * 5,
)
EXPECT[_KP + "record_batch_data_v1.bin"] = Exp(
    records=kv(range(4), [None] * 4, [b"123", b"", b"", b"123"]),
    batches=[B(0, 1, 0, attrs=dict(crc=1199974594, timestamp_type=CREATE)),
             B(37, 1, 1), B(71, 1, 2), B(105, 1, 3)],
    timestamps=[1503648000942, 1503648001984, 1503648002162, 1503648004099],
    ts_types=CREATE,
)
EXPECT[_KP + "record_batch_data_v0.bin"] = Exp(
    records=kv(range(4), [None] * 4, [b"123", b"", b"", b"123"]),
    batches=[B(0, 0, 0, attrs=dict(crc=-22012481 & 0xFFFFFFFF,
                                   timestamp_type=NO_TS)),
             B(29, 0, 1), B(55, 0, 2), B(81, 0, 3)],
    timestamps=[-1] * 4,
    ts_types=NO_TS,
)
EXPECT[_KP + "control_batch_data_v2.bin"] = Exp(  # negative: CRC does not verify
    records=[(0, b"\x00\x00\x00\x00", b"opaque-control-message")],
    batches=[B(0, 2, 0, base=0, attrs=dict(is_control=True, is_transactional=False,
                                           base_timestamp=9999999, max_timestamp=9999999,
                                           record_count=1))],
    timestamps=[9999999],
)

# ---------------------------------------------------------------------------------------------
# kafka-rust-test-data: Kafka 0.8.2/0.9 Fetch v0, magic 0, one message per line of fetch1.txt


def _lines(name):
    return (V.VECTORS / "kafka-rust-test-data" / name).read_bytes().splitlines()


_RUST_LINES = _lines("fetch1.txt")
_RUST_ID = "kafka-rust-test-data/{}[my-topic-0]"
EXPECT[_RUST_ID.format("fetch1.mytopic.1p.nocompression.kafka.0821")] = Exp(
    records=kv(range(42), [None] * 42, _RUST_LINES),
    n_batches=42, spot={0: B(0, 0, 0), 1: B(497, 0, 1), 41: B(12319, 0, 41)},
    timestamps=[-1] * 42, ts_types=NO_TS,
)
for _name, _codec in [("fetch1.mytopic.1p.gzip.kafka.0821", GZIP),
                      ("fetch1.mytopic.1p.snappy.kafka.0821", SNAPPY),
                      ("fetch1.mytopic.1p.snappy.kafka.0822", SNAPPY)]:
    EXPECT[_RUST_ID.format(_name)] = Exp(
        records=kv(range(42), [None] * 42, _RUST_LINES),
        batches=[B(0, 0, 41, _codec, base=0, n=42)],
        timestamps=[-1] * 42, ts_types=NO_TS,
    )
for _name in ["fetch2.mytopic.nocompression.kafka.0900",
              "fetch2.mytopic.nocompression.invalid_crc.kafka.0900"]:
    EXPECT[_RUST_ID.format(_name)] = Exp(
        records=[(0, None, _lines("fetch2.txt")[0])], batches=[B(0, 0, 0)])

# ---------------------------------------------------------------------------------------------
# kafkajs-fixtures: broker Fetch responses v0..v11, kafkajs Produce requests, record sets

_JS = "kafkajs-fixtures/"
_KEYS3 = [b"key-0", b"key-1", b"key-2"]
_VALS3 = [b"some-value-0", b"some-value-1", b"some-value-2"]
_HDR3 = [((f"header-key-{i}", f"header-value-{i}".encode()),) for i in range(3)]

EXPECT[_JS + "messageSet__messages_v0_GZIP.bin"] = Exp(
    records=kv(range(3), _KEYS3, _VALS3), batches=[B(0, 0, 2, GZIP, base=0, n=3)],
    ts_types=NO_TS)
EXPECT[_JS + "messageSet__messages_v0_uncompressed.json.bin"] = Exp(
    records=kv(range(3), _KEYS3, _VALS3), batches=[B(0, 0, 0), B(43, 0, 1), B(86, 0, 2)])
EXPECT[_JS + "recordBatch__v0_record.bin"] = Exp(  # record body put in a synthetic batch
    records=[(0, b"key-0", b"some-value-0")], batches=[B(0, 2, 0, base=0)],
    headers=[(("header-key-0", b"header-value-0"), ("header-key-1", b"header-value-1"),
              ("header-key-1", b"header-value-2"))],
)
# gzip + LogAppendTime (attributes 0x09): every record takes the batch max timestamp
# (DECODED.txt shows the CreateTime delta instead; Kafka's rule is asserted).
EXPECT[_JS + "recordBatch__v0_recordbatch.bin"] = Exp(
    records=[(0, b"key-0", b"value-0-2020-08-14T17:13:08.682Z")],
    batches=[B(0, 2, 0, GZIP, base=0, attrs=dict(
        attributes=0x09, timestamp_type=APPEND, base_timestamp=1597425188775,
        max_timestamp=1597425188809, producer_id=-1, producer_epoch=0, base_sequence=0))],
    timestamps=[1597425188809], ts_types=APPEND, sequences=[0],
)
EXPECT[_JS + "recordBatch__v0_recordbatch_zstd.bin"] = Exp(  # anomaly: see test below
    records=RAISES,
    batches=[B(0, 2, 0, NONE, base=0, attrs=dict(
        partition_leader_epoch=911, record_count=1, base_timestamp=1602081211219,
        producer_epoch=0, base_sequence=0))],
)
EXPECT[_JS + "recordBatch_crc32C__crcPayload.bin"] = Exp(
    records=kv(range(3),
               [b"key-82cf093c743bd3836e18", b"key-06e3f59abd27ecf561a3",
                b"key-f370294cf39e565017a6"],
               [b"some-value-78eaecf4b575fa3e404c", b"some-value-7f3094535db34cf036b1",
                b"some-value-1ab90b77929dffc4aac9"]),
    batches=[B(0, 2, 2, base=0, n=3, attrs=dict(crc=818496390, record_count=3))],
    timestamps=[1509928155660] * 3, headers=[(("a", b"b"),)] * 3,
)


def _js_fetch(name, topic, partition=0):
    return f"{_JS}requests_fetch__{name}.bin[{topic}-{partition}]"


EXPECT[_js_fetch("v0_response", "test-topic-79b94d9dcfd65e1283a9")] = Exp(
    records=[(0, b"key-0", b"some-value-0")], batches=[B(0, 0, 0)], ts_types=NO_TS)
EXPECT[_js_fetch("v1_response", "test-topic-6354595aa07c0fa2ae55")] = Exp(
    records=[(0, b"key-0", b"some-value-0")], batches=[B(0, 0, 0)], ts_types=NO_TS)
EXPECT[_js_fetch("v0_response_gzip", "test-topic-be3cb8c367c9d903933f")] = Exp(
    records=kv(range(3), _KEYS3, _VALS3), batches=[B(0, 0, 0), B(43, 0, 1), B(86, 0, 2)])
EXPECT[_js_fetch("v1_response_gzip", "test-topic-ae0b74cd45cb7c1971dd")] = Exp(
    records=kv(range(3), _KEYS3, _VALS3), batches=[B(0, 0, 2, GZIP, base=0, n=3)])
for _v in ("v2", "v3"):
    EXPECT[_js_fetch(f"{_v}_response", "test-topic-131c279f35eeb2df6bc7")] = Exp(
        records=kv(range(3), _KEYS3, _VALS3), batches=[B(0, 1, 0), B(51, 1, 1), B(102, 1, 2)],
        timestamps=[1509827715172, 1509827715173, 1509827715173], ts_types=CREATE)
    EXPECT[_js_fetch(f"{_v}_response_gzip", "test-topic-7d48c01ed48f0667672b")] = Exp(
        records=kv(range(3), _KEYS3, _VALS3),
        batches=[B(0, 1, 2, GZIP, base=0, n=3, attrs=dict(max_timestamp=1509827715534))],
        timestamps=[1509827715533, 1509827715534, 1509827715534], ts_types=CREATE)
EXPECT[_js_fetch("v2_response_index_out_of_range", "test-topic-index-out-of-range", 1)] = Exp(
    records=kv(range(15733908, 15733911), _KEYS3, _VALS3),
    batches=[B(0, 0, 15733908), B(43, 0, 15733909), B(86, 0, 15733910)], partial=9)
for _p in (9, 3, 6, 0):  # each partition's 1024 bytes are the start of one larger entry
    EXPECT[_js_fetch("v2_response_partial_messages_many_partitions",
                     "topic-partial-message", _p)] = Exp(records=[], batches=[], partial=1024)

_V4_BATCH = B(0, 2, 2, NONE, base=0, n=3, attrs=dict(
    producer_id=-1, producer_epoch=0, base_sequence=0, base_timestamp=1509827900073,
    max_timestamp=1509827900073, partition_leader_epoch=0, record_count=3))
_V4_EXP = Exp(records=kv(range(3), _KEYS3, _VALS3), batches=[_V4_BATCH],
              timestamps=[1509827900073] * 3, ts_types=CREATE, headers=_HDR3,
              sequences=[0, 1, 2])
_LONG = "test-topic-2077b9d2b36c4082e594-4020-b5a52b27-56df-4b87-800d-82c1cf26317d"
for _name, _topic in [
        ("v4_response", "test-topic-ab4d54774dcadc395a7f"),
        ("v5_response",
         "test-topic-c935d678835de2c9c79e-2064-677041b7-df54-4d4d-a53a-b9133d2fdc8c"),
        ("v6_response",
         "test-topic-07eae0edd6400fe2733a-3088-330080bb-97f1-4a09-89e1-f0fe5c137ab2"),
        ("v7_response", _LONG), ("v8_response", _LONG), ("v9_response", _LONG),
        ("v10_response", _LONG), ("v11_response", _LONG)]:
    EXPECT[_js_fetch(_name, _topic)] = _V4_EXP

EXPECT[_js_fetch("v4_response_gzip", "test-topic-43c95a3dc68dbf78a359")] = Exp(
    records=kv(range(6), [b"key-0", b"key-1", b"key-2", b"key-1", b"key-2", b"key-3"],
               [b"some-value-%d" % i for i in (0, 1, 2, 1, 2, 3)]),
    batches=[B(0, 2, 2, GZIP, base=0, n=3), B(124, 2, 5, GZIP, base=3, n=3)],
    timestamps=[1509827900073] * 6, sequences=[0, 1, 2, 0, 1, 2])
_KEY010 = b"9bf6284dc11345082649-78767-f79b4780-f2aa-4bbb-979f-9a4815652b5c"
EXPECT[_js_fetch("v4_response_010_format",
                 "test-topic2-08a2f12dddd8c924460f-78767-02073a3e-0622-4d0d-9ee9-b5d6a5a326f1",
                 1)] = Exp(records=[(0, b"key-" + _KEY010, b"value-" + _KEY010)],
                           batches=[B(0, 1, 0)], timestamps=[1538502423117], ts_types=CREATE)
_SCALA_TS = [1539644731680, 1539644732194, 1539644732699, 1539644733203, 1539644733708,
             1539644734213]
EXPECT[_js_fetch("v4_from_scala_producer_response",
                 "test-topic-bec28e95-0c2f-49d3-a230-2418dceac885")] = Exp(
    records=kv(range(6), [b"KEY-%d" % i for i in range(1, 7)],
               [b"VALUE-Lorem ipsum dolor sit amet-%d" % i for i in range(1, 7)]),
    batches=[B(107 * i, 2, i, base=i, attrs=dict(
        producer_id=-1, producer_epoch=-1, base_sequence=-1, base_timestamp=_SCALA_TS[i]))
        for i in range(6)],
    timestamps=_SCALA_TS, sequences=[-1] * 6)
EXPECT[_js_fetch("v4_response_mixed_formats", "test-mixed-message-formats")] = Exp(
    records=None,  # 2425 records: checked in test_kafkajs_mixed_formats_log
    n_batches=1611 + 3,
    spot={0: B(0, 1, 0), 1610: B(120499 - 75, 1, 1610),
          1611: B(120499, 2, 1847, base=1611, n=237),
          1612: B(132075, 2, 1912, base=1848, n=65),
          1613: B(135233, 2, 2424, base=1913, n=512)})
EXPECT[_js_fetch("v4_response_snappy", "topic-test", 3)] = Exp(  # raw snappy (no xerial)
    records=[(0, b"key-149", b"value-149-2019-02-04T15:13:48.187Z")],
    batches=[B(0, 2, 0, SNAPPY, base=0)], timestamps=[1549293228209])
EXPECT[_js_fetch("v4_response_snappy", "topic-test", 0)] = Exp(records=[], batches=[])


def _js_produce(name, topic):
    return f"{_JS}requests_produce__{name}.bin[{topic}-0]"


EXPECT[_js_produce("v2_request", "test-topic-9f825c3f60bb0b4db583")] = Exp(
    # client-encoded magic-1 messages carry offset -1
    records=kv([-1] * 3, [b"key-bb252ae5801883c12bbd", b"key-8a14e73a88e93f7c3a39",
                          b"key-183a2d8eb3683f080b82"],
               [b"some-value-10340c6329f8bbf5b4a2", b"some-value-4fa91513bffbcc0e34b3",
                b"some-value-938afcf1f2ef0439c752"]),
    batches=[B(0, 1, -1), B(89, 1, -1), B(178, 1, -1)], timestamps=[1509819296569] * 3)
for _os in ("darwin", "linux"):  # wrapper offset 0: inner relative offsets taken as absolute
    EXPECT[_js_produce(f"v2_request_gzip_{_os}", "test-topic-43395f618a885920238c")] = Exp(
        records=kv(range(3), [b"key-d27f2271f5447fe62503", b"key-3be6f0b8e6c987d0aedc",
                              b"key-af98821b43a80d6aa4e8"],
                   [b"some-value-e64a333e986853959623", b"some-value-7259046cfda805b0172e",
                    b"some-value-94b9e769ec3e401bfd57"]),
        batches=[B(0, 1, 0, GZIP, base=0, n=3)], timestamps=[1509928155660] * 3)
EXPECT[_js_produce("v3_request", "test-topic-ebba68879c6f5081d8c2")] = Exp(
    records=kv(range(3), [b"key-9d0f348cb2e730e1edc4", b"key-c7073e965c34b4cc6442",
                          b"key-1693b184a9b52dbe03bc"],
               [b"some-value-a17b4c81f9ecd1e896e3", b"some-value-65df422070d7ad73914f",
                b"some-value-3fcb65ffca087cba20ad"]),
    batches=[B(0, 2, 2, base=0, n=3, attrs=dict(producer_id=-1, producer_epoch=0,
                                                base_sequence=10))],
    headers=[(("a", b"b"), ("c", b"d"), ("c", b"e")), (("a", b"b"),), (("a", b"b"),)],
    sequences=[10, 11, 12], timestamps=[1509928155660] * 3)


def _uuid_records(pairs):
    keys = [b"key-" + k for k, _, _, _ in pairs]
    values = [b"some-value-" + v for _, v, _, _ in pairs]
    headers = [((f"hkey-{hk}", b"hvalue-" + hv),) for _, _, hk, hv in pairs]
    return kv(range(3), keys, values), headers


_P4, _H4 = _uuid_records([
    (b"d5cd3b9f66c99bad43f9-99758-6869e844-8d5b-489c-a57b-db049273e7e1",
     b"01e05f8db1f05f560a4e-99758-5522807d-67a8-4331-af74-49700cfa36f2",
     "c5df4e17030b2f9da8ec-99758-fddc284f-d33e-4934-9107-f30cbf415bb7",
     b"438ba61c75827be00c3a-99758-27c44636-d8cc-467c-b33e-feb52d46276c"),
    (b"09f9d35672f324d3421c-99758-46c071d7-1c03-4b23-90eb-2ec6b1af864f",
     b"96d540560a76c83ed675-99758-b23ddac7-521c-417b-8cc3-043d3b709c9f",
     "48cc17a9670f774fa81f-99758-fc6b51c5-353d-41bf-8435-8966ba48bae6",
     b"23bd6310f1af65ddbb89-99758-2e48ce3a-4f89-41a0-8f76-c76b986f2b62"),
    (b"42558046ab47e2d1bf50-99758-f9555cd0-6e49-42cd-aa81-cb57a78d4d31",
     b"ed896f5001b143a3405d-99758-40566a64-7f6f-45c0-b983-54e5640b6dc0",
     "05e3f36cbe97c8585a17-99758-8326bcc2-c3df-43d8-9365-f82e10690ec6",
     b"15319b33952d4e94b39f-99758-81a53e7d-164f-49d2-8de1-69533ce163b8")])
_T4 = "test-topic-5370ce2c813663fce3ca-99758-4d9ea731-5a23-4d5b-abbd-8390588d655d"
EXPECT[_js_produce("v4_request", _T4)] = Exp(
    records=_P4, headers=_H4, batches=[B(0, 2, 2, base=0, n=3)], sequences=[0, 1, 2])
_P5, _H5 = _uuid_records([
    (b"d319075933d888e408bc-706-fbbed489-92e5-4f02-b230-014dd3784e5a",
     b"bbf65807336003358c44-706-13350820-511c-48f1-a6df-f958e456912c",
     "ca71207e127ca2c70c05-706-b08da511-56e6-453b-b16e-3ec022b8dd6f",
     b"bbdb46905198e3e37cc9-706-cfc42cd5-8a54-4c89-b7d8-c8455c4ae7dc"),
    (b"788fdfca430de5811b96-706-7f435dff-6fed-43ba-a354-e2390382f67c",
     b"358f20a7530d8828012c-706-6e4c9495-bc6f-4a31-8132-eef704fa6200",
     "779dac3340e486209484-706-82e9df9e-a10d-44fc-b87c-cc9d38396bd6",
     b"d02355b58de96ff30821-706-3e724986-a6db-4c35-9759-c53ce82e7e8e"),
    (b"86b4648e49189cf59008-706-ac4eb7b8-430c-4798-88a4-5ebd73069b2d",
     b"54e08078b0463df8fab9-706-eec3991d-c68d-45e6-953c-8575254a3f33",
     "a977d0fd09fdea0fa1bb-706-979dbc08-c04b-4b7b-99d8-449373521ba8",
     b"57152eb6f8719e706fdc-706-ebf22d1f-1379-4b1f-bfa8-adbd24064cd4")])
_T5 = "test-topic-1c8ace0ecfb3cb281243-706-b9f24ac1-6a1e-4458-ba5f-5fc0c51a46c7"
EXPECT[_js_produce("v5_request", _T5)] = Exp(
    records=_P5, headers=_H5, batches=[B(0, 2, 2, base=0, n=3)], sequences=[0, 1, 2])
_HDR10 = [tuple((f"header-{c}{i}", f"header-value-{c}{i}".encode()) for c in "abc")
          for i in range(10)]
for _name, _topic, _pid in [
        ("v6_request",
         "test-topic-390850453b1c004039ea-1417-1c32a507-edbb-481d-9d9c-e287743f4b74", -1),
        ("v7_request",
         "test-topic-923030b997a626c23158-517-bdaf87ff-6ab3-4ba6-ac23-ad463d5230cd", 4004)]:
    EXPECT[_js_produce(_name, _topic)] = Exp(
        records=kv(range(10), [b"key-%d" % i for i in range(10)],
                   [b"value-%d" % i for i in range(10)]),
        batches=[B(0, 2, 9, base=0, n=10, attrs=dict(producer_id=_pid, producer_epoch=0,
                                                     base_sequence=0, is_transactional=False))],
        headers=_HDR10, sequences=list(range(10)), timestamps=[1509928155660] * 10)

# ---------------------------------------------------------------------------------------------
# kafka-go-fixtures: real broker Fetch v10, magic 1 and 2 mixed in one partition

_GO_LETTERS = dict(a="alpha", b="beta", c="gamma", d="delta", e="epsilon", f="zeta",
                   g="eta", h="theta")
# MANIFEST: expected key sequence per file; entries: (position, magic, codec, letters)
_GO = {
    "v2b-v1": ("abab", [(0, 2, NONE, "ab"), (150, 1, NONE, "a"), (222, 1, NONE, "b")],
               [1633403662305, 1633403662333, 1633403813153, 1633403813185]),
    "v2bc-v1c": ("abab", [(0, 2, GZIP, "ab"), (133, 1, GZIP, "ab")],
                 [1633405558246, 1633405558271, 1633405589461, 1633405589489]),
    "v2bc-v1": ("abcd", [(0, 2, GZIP, "ab"), (133, 1, NONE, "c"), (205, 1, NONE, "d")],
                [1633407550377, 1633407550403, 1633407620101, 1633407622399]),
    "v2bc-v1-v1c": ("abcdef", [(0, 2, GZIP, "ab"), (133, 1, NONE, "c"), (205, 1, NONE, "d"),
                               (277, 1, GZIP, "ef")],
                    [1633407550377, 1633407550403, 1633407620101, 1633407622399,
                     1633407758327, 1633407758928]),
    "v1-v1": ("abcd", [(0, 1, NONE, "a"), (72, 1, NONE, "b"), (143, 1, NONE, "c"),
                       (215, 1, NONE, "d")],
              [1633413553279, 1633413553303, 1633413607789, 1633413609138]),
    "v1c-v1c": ("abcd", [(0, 1, GZIP, "ab"), (132, 1, GZIP, "c"), (239, 1, GZIP, "d")],
                [1633413948492, 1633413948532, 1633413977589, 1633413979484]),
    "v1c-v1-v1c": ("abcdef", [(0, 1, GZIP, "ab"), (133, 1, NONE, "c"), (205, 1, NONE, "d"),
                              (277, 1, GZIP, "e"), (386, 1, GZIP, "f")],
                   [1633414139305, 1633414139337, 1633414156899, 1633414157646,
                    1633414170951, 1633414172624]),
    "v2-v2": ("abcd", [(0, 2, NONE, "ab"), (150, 2, NONE, "cd")],
              [1633414495929, 1633414495954, 1633414504352, 1633414505247]),
    "v2c-v2c": ("abcd", [(0, 2, GZIP, "ab"), (133, 2, GZIP, "cd")],
                [1633414684500, 1633414684528, 1633414694417, 1633414695120]),
    "v2c-v2-v2c": ("abcdef", [(0, 2, GZIP, "ab"), (133, 2, NONE, "cd"), (285, 2, GZIP, "ef")],
                   [1633414998643, 1633414998669, 1633415010912, 1633415011429,
                    1633415023097, 1633415024052]),
    "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": (
        "ababcdcdefefghghghgh",
        [(0, 1, NONE, "a"), (72, 1, NONE, "b"), (143, 1, GZIP, "a"), (250, 1, GZIP, "b"),
         (356, 2, NONE, "c"), (462, 2, NONE, "d"), (568, 2, GZIP, "c"), (686, 2, GZIP, "d"),
         (804, 2, NONE, "ef"), (957, 2, GZIP, "ef"), (1094, 2, NONE, "gh"),
         (1244, 2, GZIP, "gh"), (1375, 1, NONE, "g"), (1445, 1, NONE, "h"),
         (1517, 1, GZIP, "gh")],  # the last wrapper holds relative offsets 0,1 -> 18,19
        [1633286796965, 1633286798177, 1633286831051, 1633286832271, 1633286986079,
         1633286987464, 1633287000247, 1633287002095, 1633287470665, 1633287471172,
         1633287491915, 1633287492643, 1633372020252, 1633372020968, 1633372032421,
         1633372032952, 1633374027123, 1633374027161, 1633374040551, 1633374040837]),
}
_GO_TOPICS = {"v1-v1": "test-edgy", "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": "test-88",
              "v1c-v1-v1c": "test-breezy", "v1c-v1c": "test-gutsy", "v2-v2": "test-lucid",
              "v2b-v1": "test-feisty", "v2bc-v1-v1c": "test-hardy", "v2bc-v1": "test-hardy",
              "v2bc-v1c": "test-karmic", "v2c-v2-v2c": "test-natty",
              "v2c-v2c": "test-oneiric"}


def _go_exp(seq, entries, timestamps):
    assert "".join(e[3] for e in entries) == seq  # the table restates the MANIFEST sequence
    batches, first = [], 0
    for pos, magic, codec, letters in entries:
        last = first + len(letters) - 1
        batches.append(B(pos, magic, last, codec, base=first, n=len(letters)))
        first = last + 1
    keys = [_GO_LETTERS[c].encode() for c in seq]
    values = [b'{"count":0,"filler":"%s"}' % (c.encode() * 10) for c in seq]
    return Exp(records=kv(range(len(seq)), keys, values), batches=batches,
               timestamps=timestamps, ts_types=CREATE)


for _name, (_seq, _entries, _ts) in _GO.items():
    EXPECT[f"kafka-go-fixtures/{_name}.hex[{_GO_TOPICS[_name]}-0]"] = _go_exp(_seq, _entries, _ts)

# ---------------------------------------------------------------------------------------------
# rskafka-literals: librdkafka / Java-client v2 batches, one per codec

_RS = "rskafka-literals/record_rs__test_decode_fixture_"
_RS_BATCH = dict(partition_leader_epoch=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                 timestamp_type=CREATE)
for _name, _codec, _ts, _key in [("nocompression", NONE, 1641388919, b""),
                                 ("gzip", GZIP, 1643105170535, b"x" * 100),
                                 ("lz4", LZ4, 1643649156900, b"x" * 100),
                                 ("snappy", SNAPPY, 1643735486034, b"x" * 100),
                                 ("zstd", ZSTD, 1643889882029, b"x" * 100)]:
    EXPECT[f"{_RS}{_name}.bin"] = Exp(
        records=[(0, _key, b"hello kafka")], headers=[(("foo", b"bar"),)],
        batches=[B(0, 2, 0, _codec, base=0, attrs=_RS_BATCH)], timestamps=[_ts],
        ts_types=CREATE, sequences=[-1])
EXPECT[f"{_RS}snappy_java.bin"] = Exp(  # xerial-framed snappy from the Java client
    records=[(0, b"x" * 100, b"hello kafka"), (1, b"x" * 100, b"some value")],
    headers=[(("foo", b"bar"),)] * 2, batches=[B(0, 2, 1, SNAPPY, base=0, n=2, attrs=_RS_BATCH)],
    timestamps=[1645092371121] * 2)
EXPECT[f"{_RS}null_key.bin"] = Exp(
    records=None,  # value: 103-byte protobuf, checked in test_rskafka_null_key
    headers=[(("content-type", b'application/x-protobuf; schema="influxdata.iox.'
                               b'write_buffer.v1.WriteBufferPayload"'),
              ("iox-namespace", b"namespace"))],
    batches=[B(0, 2, 0, NONE, base=0, attrs=_RS_BATCH)], timestamps=[1643879633398])

# ---------------------------------------------------------------------------------------------
# sarama-literals: Go client encoder output

_SA = "sarama-literals/"
_SA_REC = dict(key=b"\x01\x02\x03\x04", value=b"\x05\x06\x07", headers=(("\x08\t\n", b"\x0b\x0c"),))
_SA_V2 = dict(base_timestamp=1479847795000, max_timestamp=0, producer_id=0, producer_epoch=0,
              base_sequence=0, partition_leader_epoch=0)
for _name, _codec in [("uncompressed_1rec_header_L94", NONE), ("gzip_1rec_header_L143", GZIP),
                      ("snappy_xerial_1rec_header_L180", SNAPPY), ("lz4_1rec_header_L221", LZ4)]:
    EXPECT[f"{_SA}record_test__recordbatch_v2_{_name}.bin"] = Exp(
        records=[(0, _SA_REC["key"], _SA_REC["value"])], headers=[_SA_REC["headers"]],
        batches=[B(0, 2, 0, _codec, base=0, attrs=dict(_SA_V2, record_count=1))],
        timestamps=[1479847795005], sequences=[0])
for _name, _control in [("empty_L35", False), ("control_empty_L60", True)]:
    EXPECT[f"{_SA}record_test__recordbatch_v2_{_name}.bin"] = Exp(
        records=[], batches=[B(0, 2, 0, base=0, n=0, attrs=dict(
            record_count=0, is_control=_control, size_in_bytes=61))])

_SA_MSG = (0x550000, None, b"\x00\xee")  # oneMessageFetchResponse's magic-0 message
_SA_F = _SA + "fetch_response_test__{}.bin[topic-5]"
for _name in ("oneMessageFetchResponse_L19", "oneMessageFetchResponseV4_L161",
              "preferredReplicaFetchResponseV11_L183"):
    EXPECT[_SA_F.format(_name)] = Exp(records=[_SA_MSG], batches=[B(0, 0, 0x550000)],
                                      timestamps=[-1], ts_types=NO_TS)
EXPECT[_SA_F.format("overflowMessageFetchResponse_L38")] = Exp(
    records=[_SA_MSG], batches=[B(0, 0, 0x550000)], partial=20)
EXPECT[_SA_F.format("oneRecordFetchResponse_L62")] = Exp(
    records=[(0, _SA_REC["key"], _SA_REC["value"])], headers=[_SA_REC["headers"]],
    batches=[B(0, 2, 0, base=0, attrs=dict(base_timestamp=10, max_timestamp=0, record_count=1,
                                           producer_id=0, base_sequence=0))],
    timestamps=[15], sequences=[0])
EXPECT[_SA_F.format("partialFetchResponse_L99")] = Exp(records=[], batches=[], partial=64)
EXPECT[_SA_F.format("emptyRecordsFetchResponsev11_L130")] = Exp(
    records=[], batches=[B(0, 2, 0, base=0, n=0, attrs=dict(
        record_count=0, base_timestamp=10, max_timestamp=11, producer_id=1, producer_epoch=0,
        base_sequence=61))])
for _name in ("preferredReplicaFetchResponseV12_L209", "abortedTxnFetchResponseV12_L239"):
    EXPECT[_SA_F.format(_name)] = Exp(records=[], batches=[])
EXPECT_NO_BLOBS.add(_SA + "fetch_response_test__emptyFetchResponse_L15.bin")

_SA_M = _SA + "message_test__{}.bin"  # legacy messages given offset 0 by the helper
EXPECT[_SA_M.format("emptyMessage_L11")] = Exp(records=[(0, None, None)], batches=[B(0, 0, 0)],
                                               timestamps=[-1], ts_types=NO_TS)
EXPECT[_SA_M.format("emptyV1Message_L19")] = Exp(
    records=[(0, None, None)], batches=[B(0, 1, 0, attrs=dict(timestamp_type=CREATE))],
    timestamps=[0], ts_types=CREATE)
for _name, _magic, _codec, _key in [("emptyBulkGzipMessage_L84", 0, GZIP, None),
                                    ("emptyBulkSnappyMessage_L72", 0, SNAPPY, b""),
                                    ("emptyBulkLZ4Message_L95", 1, LZ4, None)]:
    # two empty inner messages; sarama's snappy one writes a zero-length key
    EXPECT[_SA_M.format(_name)] = Exp(records=[(0, _key, b""), (1, _key, b"")],
                                      batches=[B(0, _magic, 0, _codec, base=0, n=2)])
EXPECT[_SA_M.format("emptyGzipMessage_L36")] = Exp(records=[], batches=[B(0, 0, 0, GZIP, n=0)])
# zstd in a magic-1 wrapper: Kafka's legacy reader refuses it (zstd needs magic 2), see
# test_sarama_magic1_zstd_wrapper_is_refused_but_holds_two_messages
for _name in ("emptyBulkZSTDMessage_L109", "emptyZSTDMessage_L61"):
    EXPECT[_SA_M.format(_name)] = Exp(records=RAISES, batches=[B(0, 1, 0, ZSTD, n=None)])
# a magic-1 wrapper around an empty inner set: see test_sarama_wrappers_around_an_empty_set
EXPECT[_SA_M.format("emptyLZ4Message_L48")] = Exp(records=None, batches=[B(0, 1, 0, LZ4, n=None)])

# ---------------------------------------------------------------------------------------------
# codecrafters-kafka-tester-kraft-datadir: real Kafka 4.0 KRaft log segments

_CC = "codecrafters-kafka-tester-kraft-datadir/{}/kraft-combined-logs/{}/00000000000000000000.log"
EXPECT[_CC.format("e856b9a", "foo-0")] = Exp(
    records=kv(range(3), [None] * 3, [b"m1", b"m2", b"m3"]),
    batches=[B(0, 2, 1, base=0, n=2, attrs=dict(producer_id=0, producer_epoch=0, base_sequence=0,
                                                max_timestamp=1725272040952)),
             B(80, 2, 2, base=2, attrs=dict(producer_id=0, producer_epoch=0, base_sequence=2,
                                            max_timestamp=1725272041932))],
    timestamps=[1725272040411, 1725272040952, 1725272041932], sequences=[0, 1, 2])
EXPECT[_CC.format("510714e", "foo-0")] = Exp(
    records=[(0, None, b"Hello World!")],
    batches=[B(0, 2, 0, base=0, attrs=dict(producer_id=0, producer_epoch=0, base_sequence=0))],
    timestamps=[1726045973899], sequences=[0])
_LEADER_CHANGE = B(0, 2, 0, base=0, attrs=dict(is_control=True, partition_leader_epoch=1))
EXPECT[_CC.format("e856b9a", "__cluster_metadata-0")] = Exp(
    records=None, n_batches=109,  # offsets 0..115 (next snapshot: 116)
    spot={0: _LEADER_CHANGE, 1: B(91, 2, 4, base=0 + 1, n=4), 2: B(236, 2, 5, base=5)})
EXPECT[_CC.format("510714e", "__cluster_metadata-0")] = Exp(
    records=None, n_batches=123,  # offsets 0..128 (snapshot 129)
    spot={0: _LEADER_CHANGE, 1: B(91, 2, 4, base=1, n=4), 2: B(236, 2, 6, base=5, n=2),
          3: B(497, 2, 7, base=7)})
_CC_RECORD_COUNTS = {"e856b9a": 116, "510714e": 129}

# ---------------------------------------------------------------------------------------------
# Checks shared by the per-file tests

_FILES = V.record_vector_files()


def _blobs(relpath):
    return V.load_blobs(relpath)


def _check_entry(batch, exp: B, where):
    assert batch.position == exp.pos, where
    assert batch.magic == exp.magic, where
    assert batch.compression_type == exp.codec, where
    assert batch.last_offset == exp.last, where
    assert batch.next_offset == exp.last + 1, where
    if exp.magic == 2 or exp.codec == NONE:
        # (a legacy wrapper's base offset is checked in test_legacy_wrapper_base_offset)
        base = exp.last if exp.base is None else exp.base
        assert batch.base_offset == base, where
    for name, value in exp.attrs.items():
        assert getattr(batch, name) == value, f"{where}: {name}"


def _check_blob(blob: V.RecordsBlob, exp: Exp):
    mr = MemoryRecords(blob.data)
    batches = list(mr.batches())
    framing = V.scan_entry_framing(blob.data)
    # whole entries only; a cut-short trailing entry is reported, not decoded
    assert mr.valid_bytes == len(blob.data) - exp.partial
    assert mr.partial_bytes == exp.partial
    assert [(b.position, b.size_in_bytes) for b in batches] == \
        [(e.position, e.size) for e in framing.entries]
    expected_batches = exp.batches
    if expected_batches is not None:
        assert len(batches) == len(expected_batches)
        spot = dict(enumerate(expected_batches))
    else:
        assert len(batches) == exp.n_batches
        spot = exp.spot
    for i, eb in spot.items():
        _check_entry(batches[i], eb, f"{blob.id} entry {i}")
        if eb.n is not None and exp.records is not RAISES:
            assert len(batches[i].records()) == eb.n, f"{blob.id} entry {i}"
    if exp.records is RAISES:
        with pytest.raises(CorruptRecordError):  # typed (InvalidRecordError is a subclass)
            list(mr.records())
        return
    if exp.records is None:
        return
    if not all(b.is_valid() for b in batches):
        # consumers check CRCs by default (check.crcs): decoding must refuse, and still
        # shows the content when asked not to check
        with pytest.raises(CorruptRecordError):
            list(mr.records())
        recs = list(mr.records(verify_crc=False))
    else:
        recs = list(mr.records())
    assert [(r.offset, r.key, r.value) for r in recs] == exp.records
    if exp.timestamps is not None:
        assert [r.timestamp for r in recs] == exp.timestamps
    if exp.ts_types is not None:
        types = exp.ts_types if isinstance(exp.ts_types, list) else [exp.ts_types] * len(recs)
        assert [r.timestamp_type for r in recs] == types
    if exp.headers is not None:
        assert [tuple(tuple(h) for h in r.headers) for r in recs] == exp.headers
    else:
        assert all(r.headers == () for r in recs)
    if exp.sequences is not None:
        assert [r.sequence for r in recs] == exp.sequences


# ---------------------------------------------------------------------------------------------
# Per-file tests


def test_every_records_vector_has_an_expectation():
    ids = {b.id for f in _FILES for b in _blobs(f)}
    assert ids == set(EXPECT), (sorted(ids - set(EXPECT)), sorted(set(EXPECT) - ids))
    empty = {f for f in _FILES if not _blobs(f)}
    assert empty == EXPECT_NO_BLOBS


@pytest.mark.parametrize("relpath", _FILES, ids=V.short_id)
def test_vector_decodes_as_stated(relpath):
    blobs = _blobs(relpath)
    if relpath in EXPECT_NO_BLOBS:
        assert blobs == []  # e.g. sarama's emptyFetchResponse: no topics at all
        return
    for blob in blobs:
        _check_blob(blob, EXPECT[blob.id])


@pytest.mark.parametrize("relpath", _FILES, ids=V.short_id)
def test_vector_crc_validation(relpath):
    """validate() accepts every vector except the two with a damaged CRC, which raise
    CorruptRecordError naming the entry's position and offset."""
    for blob in _blobs(relpath):
        mr = MemoryRecords(blob.data)
        batches = list(mr.batches())
        if blob.id in CRC_NEGATIVE:
            position, offset = CRC_NEGATIVE[blob.id]
            with pytest.raises(CorruptRecordError) as info:
                mr.validate()
            assert isinstance(info.value, ValueError)
            assert (info.value.position, info.value.offset) == (position, offset)
            assert [b.is_valid() for b in batches] == [False]
            with pytest.raises(CorruptRecordError):
                batches[0].ensure_valid()
        else:
            mr.validate()
            assert all(b.is_valid() for b in batches)
            for b in batches:
                b.ensure_valid()


# ---------------------------------------------------------------------------------------------
# Negative and edge cases, one concern per test


def test_kafka_python_v2_with_trailing_zero_bytes():
    """kafka-python's test appends 4 zero bytes: valid_bytes stays 299, the rest is partial."""
    blob = V.load_blob(_KP + "record_batch_data_v2.bin")
    mr = MemoryRecords(blob.data + b"\x00" * 4)
    assert (mr.valid_bytes, mr.partial_bytes) == (299, 4)
    assert len(list(mr.batches())) == 4
    assert [r.value for r in mr.records()] == [b"123", b"", b"", b"123", b"hdr"]


def test_kafka_python_control_batch_is_an_abort_marker_with_a_bad_crc():
    blob = V.load_blob(_KP + "control_batch_data_v2.bin")
    mr = MemoryRecords(blob.data, file=blob.file)
    with pytest.raises(CorruptRecordError) as info:
        mr.validate()
    assert info.value.file == blob.file
    (record,) = list(mr.records(verify_crc=False))
    assert record.is_control
    control = parse_control_record(record.key, record.value)
    assert (control.type, control.version) == (CRT.ABORT, 0)
    # value "opaque-control-message": marker version 0x6f70 is read as version 0 (extra
    # bytes ignored), so the coordinator epoch is the next int32, b"aque"
    assert control.coordinator_epoch == struct.unpack(">i", b"aque")[0] == 1634825573


def test_kafka_rust_invalid_crc_is_named_in_the_error():
    blob = V.load_blob("kafka-rust-test-data/fetch2.mytopic.nocompression.invalid_crc.kafka.0900")
    good = V.load_blob("kafka-rust-test-data/fetch2.mytopic.nocompression.kafka.0900")
    assert blob.data[:12] == good.data[:12] and blob.data[12:16] != good.data[12:16]
    assert blob.data[16:] == good.data[16:]  # only the CRC field differs
    mr = MemoryRecords(blob.data, file=blob.file)
    with pytest.raises(CorruptRecordError) as info:
        mr.validate()
    err = info.value
    assert (err.position, err.offset, err.file) == (0, 0, blob.file)
    assert not isinstance(err, InvalidRecordError)  # a CRC failure, not a format violation
    (batch,) = list(mr.batches())
    assert batch.crc == struct.unpack(">I", blob.data[12:16])[0]
    MemoryRecords(good.data).validate()


def test_kafkajs_zstd_frame_in_an_uncompressed_batch_raises_a_typed_error():
    """CRC-32C is valid over attributes=0, but the records section is a zstd frame: decoding
    it as plain records must raise CorruptRecordError (InvalidRecordError allowed), never
    crash or return garbage."""
    blob = V.load_blob(_JS + "recordBatch__v0_recordbatch_zstd.bin")
    assert blob.data[61:65] == b"\x28\xb5\x2f\xfd"  # the zstd magic, right after the header
    mr = MemoryRecords(blob.data, file=blob.file)
    mr.validate()
    (batch,) = list(mr.batches())
    assert batch.is_valid() and batch.compression_type == NONE
    for decode in (batch.records, lambda: list(mr.records())):  # InvalidRecordError is a subclass
        with pytest.raises(CorruptRecordError) as info:
            decode()
        assert info.value.offset == 0
        assert info.value.position is not None and 0 <= info.value.position < len(blob.data)


@pytest.mark.parametrize("blob_id,whole,partial", [
    (_js_fetch("v2_response_index_out_of_range", "test-topic-index-out-of-range", 1), 3, 9),
    (_js_fetch("v2_response_partial_messages_many_partitions", "topic-partial-message", 9),
     0, 1024),
    (_SA_F.format("partialFetchResponse_L99"), 0, 64),
    (_SA_F.format("overflowMessageFetchResponse_L38"), 1, 20),
])
def test_truncated_fetch_stops_at_the_partial_entry(blob_id, whole, partial):
    (blob,) = [b for b in _blobs(blob_id.split("[")[0]) if b.id == blob_id]
    mr = MemoryRecords(blob.data)
    assert len(list(mr.batches())) == whole
    assert mr.partial_bytes == partial
    assert mr.valid_bytes == len(blob.data) - partial
    assert len(list(mr.records())) == whole
    mr.validate()  # the partial entry is ignored, not reported as corrupt


_CUT_FILES = [_KP + "record_batch_data_v2.bin", _KP + "record_batch_data_v1.bin",
              "kafka-go-fixtures/v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc.hex",
              _RS + "snappy_java.bin", _JS + "messageSet__messages_v0_GZIP.bin"]


@pytest.mark.parametrize("relpath", _CUT_FILES)
def test_any_cut_leaves_the_whole_entries_before_it(relpath):
    """Cutting a vector blob at every byte: the entries that still fit decode unchanged and
    the rest is reported as partial."""
    data = V.load_blobs(relpath)[0].data
    entries = V.scan_entry_framing(data).entries
    full = [(r.offset, r.key, r.value) for r in MemoryRecords(data).records()]
    per_entry = [len(b.records()) for b in MemoryRecords(data).batches()]
    for cut in range(len(data) + 1):
        fit = [e for e in entries if e.position + e.size <= cut]
        end = fit[-1].position + fit[-1].size if fit else 0
        mr = MemoryRecords(data[:cut])
        assert (mr.valid_bytes, mr.partial_bytes) == (end, cut - end), cut
        assert [b.position for b in mr.batches()] == [e.position for e in fit], cut
        n = sum(per_entry[:len(fit)])
        assert [(r.offset, r.key, r.value) for r in mr.records()] == full[:n], cut


def test_legacy_wrapper_base_offset_is_its_first_inner_offset():
    """Kafka's legacy batch: last offset = the wrapper's offset, base offset = the first inner
    record's absolute offset (v1: relative inner offsets rebased on the wrapper)."""
    checked = 0
    for blob_id, exp in EXPECT.items():
        for i, eb in enumerate(exp.batches or []):
            if eb.magic < 2 and eb.codec != NONE and eb.base is not None and eb.n:
                relpath = blob_id.split("[")[0]
                (blob,) = [b for b in _blobs(relpath) if b.id == blob_id]
                batch = list(MemoryRecords(blob.data).batches())[i]
                assert batch.base_offset == eb.base, (blob_id, i)
                assert batch.records()[0].offset == eb.base, (blob_id, i)
                checked += 1
    assert checked >= 15


@pytest.mark.parametrize("relpath", [f for f in _FILES if "sarama" in f or "kafka-go" in f
                                     or "kafka-rust" in f])
def test_legacy_entries_carry_no_v2_fields(relpath):
    """Legacy entries report Kafka's "none" values for v2-only fields."""
    for blob in _blobs(relpath):
        for batch in MemoryRecords(blob.data).batches():
            if batch.magic == 2:
                continue
            assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
            assert batch.partition_leader_epoch == -1
            assert not batch.is_transactional and not batch.is_control
            assert batch.timestamp_type == (NO_TS if batch.magic == 0 else CREATE)


def test_sarama_magic1_zstd_wrapper_is_refused_but_holds_two_messages():
    """sarama writes zstd inside a magic-1 wrapper (emptyBulkZSTDMessage). Kafka's legacy
    reader refuses a zstd wrapper (zstd needs magic 2), so decoding it must raise a typed
    CorruptRecordError; the payload itself, decompressed, is the MANIFEST's two empty
    messages."""
    blob = V.load_blob(_SA_M.format("emptyBulkZSTDMessage_L109"))
    mr = MemoryRecords(blob.data)
    (wrapper,) = list(mr.batches())
    assert (wrapper.magic, wrapper.compression_type) == (1, ZSTD)
    with pytest.raises(CorruptRecordError):
        list(mr.records())
    payload = blob.data[12 + 22:]  # log overhead + v1 fields up to the value bytes
    inner = records_api.decompress(ZSTD, payload)
    assert [(r.offset, r.key, r.value) for r in MemoryRecords(bytes(inner)).records()] == \
        [(0, None, b""), (1, None, b"")]


@pytest.mark.parametrize("name", ["emptyGzipMessage_L36", "emptyLZ4Message_L48",
                                  "emptyZSTDMessage_L61"])
def test_sarama_wrappers_around_an_empty_set(name):
    """A compressed wrapper whose inner message set is empty: sarama reads no messages, Kafka's
    reader raises InvalidRecordException; either answer is accepted, a crash is not. The zstd
    one is magic 1, refused like the bulk one above."""
    blob = V.load_blob(_SA_M.format(name))
    mr = MemoryRecords(blob.data)
    mr.validate()
    if name.startswith("emptyZSTD"):
        with pytest.raises(CorruptRecordError):
            list(mr.records())
        return
    try:
        assert list(mr.records()) == []
    except InvalidRecordError:
        pass


_SA_CTRL = {  # key file -> (value file or None, type, coordinator epoch)
    "control_record_test__abortTxCtrlRecKey_L10.bin":
        ("control_record_test__abortTxCtrlRecValue_L14.bin", CRT.ABORT, 10),
    "control_record_test__commitTxCtrlRecKey_L18.bin":
        ("control_record_test__commitTxCtrlRecValue_L22.bin", CRT.COMMIT, 15),
    "control_record_test__unknownCtrlRecKey_L26.bin": (None, CRT.UNKNOWN, None),
}


@pytest.mark.parametrize("relpath", [f for f in V.vector_files("sarama-literals")
                                     if V.kind_of(f)[0] == "control-record"])
def test_sarama_control_record(relpath):
    name = relpath.split("/")[-1]
    pairs = [(k, v) for k, v in _SA_CTRL.items() if name in (k, v[0])]
    assert len(pairs) == 1
    key_name, (value_name, ctype, epoch) = pairs[0]
    key = (V.VECTORS / _SA / key_name).read_bytes()
    value = None if value_name is None else (V.VECTORS / _SA / value_name).read_bytes()
    control = parse_control_record(key, value)
    assert (control.type, control.version) == (ctype, 0)
    if epoch is not None:
        assert control.coordinator_epoch == epoch


@pytest.mark.parametrize("commit", ["e856b9a", "510714e"])
def test_kraft_metadata_log(commit):
    """__cluster_metadata-0: contiguous offsets up to the snapshot offset, LEADER_CHANGE control
    batches (at 0, and 81 in e856b9a) and nothing else marked control."""
    relpath = _CC.format(commit, "__cluster_metadata-0")
    mr = MemoryRecords(V.load_blob(relpath).data)
    mr.validate()
    recs = list(mr.records())
    assert [r.offset for r in recs] == list(range(_CC_RECORD_COUNTS[commit]))
    control = [r for r in recs if r.is_control]
    assert [r.offset for r in control] == ([0, 81] if commit == "e856b9a" else [0])
    for r in control:
        parsed = parse_control_record(r.key, r.value)
        assert (parsed.type, parsed.version) == (CRT.LEADER_CHANGE, 0)
    for batch in mr.batches():
        assert batch.compression_type == NONE and batch.magic == 2
        assert batch.is_control == (batch.base_offset in {r.offset for r in control})
        assert not batch.is_transactional


@pytest.mark.parametrize("relpath", [f for f in _FILES if f.endswith(".log")], ids=V.short_id)
def test_kraft_segment_matches_its_offset_index(relpath):
    """Every .index entry (int32 relative offset, int32 position) points at a batch start
    whose base offset is that offset (cross-check of batch positions on real segments)."""
    index = (V.VECTORS / relpath).with_suffix(".index").read_bytes()
    entries = [struct.unpack_from(">ii", index, i) for i in range(0, len(index), 8)]
    by_position = {b.position: b for b in MemoryRecords(V.load_blob(relpath).data).batches()}
    for relative_offset, position in entries:
        assert by_position[position].base_offset == relative_offset
    # MANIFEST: foo-0 indexes are empty; the metadata logs hold (56, 4123) / (57, 4154), (114, 8258)
    expected = 0 if "/foo-0/" in relpath else {"e856b9a": 1, "510714e": 2}[relpath.split("/")[1]]
    assert len(entries) == expected


def test_kafkajs_mixed_formats_log():
    """0.10 message set (1611 magic-1 messages) then 0.11 batches, offsets 0..2424 = hw."""
    blob = V.load_blob(_JS + "requests_fetch__v4_response_mixed_formats.bin")
    mr = MemoryRecords(blob.data)
    mr.validate()
    recs = list(mr.records())
    assert [r.offset for r in recs] == list(range(2425)) and blob.high_watermark == 2425
    assert [b.magic for b in mr.batches()] == [1] * 1611 + [2] * 3
    assert (recs[0].key, recs[0].value, recs[0].timestamp) == (
        b"key-915", b"value-915-2019-01-17T12:27:34.848Z", 1547728054946)
    assert (recs[1610].key, recs[1611].key) == (b"key-203", b"key-814")
    assert (recs[-1].key, recs[-1].value, recs[-1].timestamp) == (
        b"key-342", b"value-342-2019-01-17T12:30:30.812Z", 1547728230830)
    assert all(r.key.startswith(b"key-") and r.value.startswith(r.key.replace(b"key", b"value"))
               for r in recs)


def test_rskafka_null_key():
    (rec,) = list(MemoryRecords(V.load_blob(_RS + "null_key.bin").data).records())
    assert rec.key is None and len(rec.value) == 103
    assert rec.value.startswith(b"\ne\n/test_topic_37398f8d-95f8-44ee-83a4-4d0c592b446d")


def test_kafka_rust_xerial_snappy_chunked_4k():
    """fetch1.snappy.chunked.4k is snappy-java's stream of fetch1.txt in 4 KiB chunks: the
    engine's snappy decoder must read the xerial framing across chunks."""
    stream = (V.VECTORS / "kafka-rust-test-data/fetch1.snappy.chunked.4k").read_bytes()
    assert len(V.xerial_snappy_chunks(stream)) > 1
    text = (V.VECTORS / "kafka-rust-test-data/fetch1.txt").read_bytes()
    assert bytes(records_api.decompress(SNAPPY, stream)) == text


def test_control_batches_flag_their_records():
    for relpath in (_KP + "control_batch_data_v2.bin",
                    _CC.format("510714e", "__cluster_metadata-0")):
        for batch in MemoryRecords(V.load_blob(relpath).data).batches():
            assert all(r.is_control == batch.is_control for r in batch.records())
