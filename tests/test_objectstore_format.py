"""The object-store tier's on-bucket format: object keys, the `.rsm-manifest` JSON, the
chunk-size codec and the custom metadata, against the Aiven plugin's own test constants
(../shared/vectors/aiven-tiered-storage-json) and hostile input."""

import base64
import json
import tracemalloc

import numpy as np
import pytest
import zstandard

from engine.common import Uuid
from engine.errors import CorruptRemoteObjectError, RemoteStorageError
from engine.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from engine.remote.objectstore.custom_metadata import (
    OBJECT_KEY,
    OBJECT_PREFIX,
    REMOTE_SIZE,
    decode_custom_metadata,
    encode_custom_metadata,
)
from engine.remote.objectstore.keys import (
    ObjectKeyFactory,
    main_path,
    parse_object_key,
)
from engine.remote.objectstore.manifest import (
    MAX_TRANSFORMED_CHUNKS_BYTES,
    Chunk,
    FixedChunkIndex,
    SegmentIndex,
    SegmentIndexes,
    SegmentManifest,
    VariableChunkIndex,
    decode_chunk_sizes,
    encode_chunk_sizes,
)
from engine.remote.storage import IndexType

AIVEN = "aiven-tiered-storage-json"


def _vector(VECTORS, name) -> bytes:
    return (VECTORS / AIVEN / name).read_bytes()


def _vector_metadata() -> RemoteLogSegmentMetadata:
    """The segment of SegmentManifestV1SerdeTest (MANIFEST.md)."""
    tip = TopicIdPartition(Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"), "topic1", 42)
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, Uuid.from_string("adh9f8BMS4anaUnD8KWfWg")),
        start_offset=0, end_offset=1000, max_timestamp_ms=1_000_000_000, broker_id=2,
        event_timestamp_ms=2_000_000_000, segment_size_in_bytes=1000,
        segment_leader_epochs={0: 100, 1: 200, 2: 300})


def _chunks(index):
    return [index.chunk(i) for i in range(index.chunk_count)]


# ---- vectors -------------------------------------------------------------------------------

def test_chunk_size_codec_vector(VECTORS):
    frame = _vector(VECTORS, "ChunkIndexSerializationTest__ENCODED_CHUNKS.zst")
    raw = zstandard.ZstdDecompressor().decompress(frame)
    assert decode_chunk_sizes(raw).tolist() == [10, 20, 30]
    assert encode_chunk_sizes([10, 20, 30]) == raw


@pytest.mark.parametrize("name,expected", [
    ("ChunkIndexSerializationTest__FIXED_SIZE_CHUNK_INDEX_JSON.json",
     [(0, 0, 100, 0, 110), (1, 100, 100, 110, 110), (2, 200, 50, 220, 30)]),
    ("ChunkIndexSerializationTest__VARIABLE_CHUNK_INDEX_JSON.json",
     [(0, 0, 100, 0, 10), (1, 100, 100, 10, 20), (2, 200, 50, 30, 30)]),
])
def test_chunk_index_vectors_decode_and_reencode(VECTORS, name, expected):
    text = _vector(VECTORS, name).decode()
    variable = "VARIABLE" in name
    manifest = _manifest_around(json.loads(text), compression=variable)
    index = SegmentManifest.parse(manifest, "k").chunk_index
    assert isinstance(index, VariableChunkIndex if variable else FixedChunkIndex)
    assert _chunks(index) == [Chunk(*c) for c in expected]
    # the plugin is deterministic here: the same JSON, byte for byte
    assert json.dumps(index.to_json_obj(), separators=(",", ":")) == text


def _manifest_around(chunk_index: dict, *, compression: bool) -> bytes:
    indexes = {n: {"position": 0, "size": 0}
               for n in ("offset", "timestamp", "producerSnapshot", "leaderEpoch")}
    indexes["transaction"] = None
    return json.dumps({"version": "1", "chunkIndex": chunk_index, "segmentIndexes": indexes,
                       "compression": compression}).encode()


@pytest.mark.parametrize("name,txn", [
    ("SegmentManifestV1SerdeTest__WITHOUT_ENCRYPTION_JSON.json", True),
    ("SegmentManifestV1SerdeTest__WITHOUT_ENCRYPTION_WITHOUT_TXN_INDEX_JSON.json", False),
])
def test_manifest_vectors_decode_and_reencode(VECTORS, name, txn):
    data = _vector(VECTORS, name)
    m = SegmentManifest.parse(data, "topic1-x/42/0.rsm-manifest")
    assert m.compression is False and m.encryption is None
    assert isinstance(m.chunk_index, FixedChunkIndex)
    assert (m.chunk_index.original_chunk_size, m.chunk_index.original_file_size,
            m.chunk_index.transformed_chunk_size,
            m.chunk_index.final_transformed_chunk_size) == (100, 1000, 110, 110)
    assert m.chunk_index.chunk_count == 10
    for pos, t in enumerate((IndexType.OFFSET, IndexType.TIMESTAMP,
                             IndexType.PRODUCER_SNAPSHOT, IndexType.LEADER_EPOCH)):
        assert (m.segment_indexes.get(t).position, m.segment_indexes.get(t).size) == (pos, 1)
    txn_index = m.segment_indexes.get(IndexType.TRANSACTION)
    assert (txn_index is not None) == txn
    if txn:
        assert (txn_index.position, txn_index.size) == (4, 1)
    # written back with the vector's remoteLogSegmentMetadata: the same bytes
    assert m.to_json(_vector_metadata()) == data
    # the informational metadata is ignored on read
    assert json.loads(m.to_json(_vector_metadata()))["remoteLogSegmentMetadata"] == json.loads(
        _vector(VECTORS, "SegmentManifestV1SerdeTest__REMOTE_LOG_SEGMENT_METADATA_JSON.json"))


def test_manifest_vector_with_aad_only_is_not_readable(VECTORS):
    """The plugin requires both dataKey and aad: its WITHOUT_SECRET_KEY constant is a
    serialization test, not a readable manifest."""
    data = _vector(VECTORS,
                   "SegmentManifestV1SerdeTest__WITH_ENCRYPTION_WITHOUT_SECRET_KEY_JSON.json")
    with pytest.raises(CorruptRemoteObjectError, match="encryption lacks dataKey"):
        SegmentManifest.parse(data, "k.rsm-manifest")
    enc = json.loads(data)["encryption"]
    assert base64.b64decode(enc["aad"]) == bytes([10, 11, 12, 13])


def test_encrypted_manifest_roundtrip(VECTORS):
    obj = json.loads(_vector(VECTORS, "SegmentManifestV1SerdeTest__WITHOUT_ENCRYPTION_JSON.json"))
    obj["encryption"] = {"dataKey": "key1:" + base64.b64encode(b"\1" * 256).decode(),
                         "aad": "CgsMDQ=="}
    m = SegmentManifest.parse(json.dumps(obj).encode(), "k")
    assert (m.encryption.key_id, m.encryption.wrapped_data_key, m.encryption.aad) == (
        "key1", b"\1" * 256, bytes([10, 11, 12, 13]))
    assert "\\u0001" not in repr(m.encryption) and "256 bytes" in repr(m.encryption)
    back = json.loads(m.to_json(_vector_metadata()))
    assert list(back) == ["version", "chunkIndex", "segmentIndexes", "compression",
                          "encryption", "remoteLogSegmentMetadata"]
    assert back["encryption"] == obj["encryption"]


def test_chunk_ranges():
    index = FixedChunkIndex(100, 250, 100, 50)
    assert list(index.chunk_ids(0, 1)) == [0]
    assert list(index.chunk_ids(99, 101)) == [0, 1]
    assert list(index.chunk_ids(200, 10_000)) == [2]
    assert list(index.chunk_ids(250, 300)) == []
    assert index.transformed_file_size == 250
    empty = FixedChunkIndex(100, 0, 100, 0)
    assert _chunks(empty) == [Chunk(0, 0, 0, 0, 0)]
    assert index == FixedChunkIndex(100, 250, 100, 50) != FixedChunkIndex(100, 250, 100, 49)
    assert index != VariableChunkIndex(100, 250, [100, 100, 50])
    assert len({index, FixedChunkIndex(100, 250, 100, 50)}) == 1


def test_fixed_sizes_checked_against_transforms(VECTORS):
    m = SegmentManifest.parse(
        _vector(VECTORS, "SegmentManifestV1SerdeTest__WITHOUT_ENCRYPTION_JSON.json"), "k")
    # the plugin's test constant says 110-byte chunks with no transform at all
    with pytest.raises(CorruptRemoteObjectError, match="transformedChunkSize 110"):
        m.check_transformed_sizes("k")
    SegmentManifest(FixedChunkIndex(100, 250, 100, 50), m.segment_indexes, False,
                    None).check_transformed_sizes("k")
    empty = SegmentIndexes(*[SegmentIndex(0, 0)] * 4, None)
    SegmentManifest(FixedChunkIndex(100, 250, 128, 78), empty, False,
                    _enc()).check_transformed_sizes("k")
    with pytest.raises(CorruptRemoteObjectError, match="finalTransformedChunkSize 50"):
        SegmentManifest(FixedChunkIndex(100, 250, 128, 50), empty, False,
                        _enc()).check_transformed_sizes("k")
    with pytest.raises(CorruptRemoteObjectError, match="offset of 1 bytes cannot hold"):
        SegmentManifest(FixedChunkIndex(100, 250, 128, 78), m.segment_indexes, False,
                        _enc()).check_transformed_sizes("k")
    with pytest.raises(CorruptRemoteObjectError, match="compression on"):
        SegmentManifest(FixedChunkIndex(100, 250, 100, 50), m.segment_indexes, True,
                        None).check_transformed_sizes("k")
    with pytest.raises(CorruptRemoteObjectError, match="compression off"):
        SegmentManifest(VariableChunkIndex(100, 250, [10, 20, 30]), m.segment_indexes, False,
                        None).check_transformed_sizes("k")


def _enc():
    from engine.remote.objectstore.manifest import EncryptionMetadata
    return EncryptionMetadata("k1", b"\1" * 256, b"\2" * 32)


# ---- keys and custom metadata --------------------------------------------------------------

def test_object_keys_are_the_plugins():
    md = _vector_metadata()
    assert main_path(md) == ("topic1-lZ6vvmajTWKDBUTV6SQAtQ/42/"
                             "00000000000000000000-adh9f8BMS4anaUnD8KWfWg")
    keys = ObjectKeyFactory("pre/")
    assert keys.key(md, "rsm-manifest") == "pre/" + main_path(md) + ".rsm-manifest"
    assert keys.key_for_read(md, "log", "other/", None) == "other/" + main_path(md) + ".log"
    assert keys.key_for_read(md, "indexes", None, "x/y") == "pre/x/y.indexes"
    assert keys.key_for_read(md, "rsm-manifest", "other/", "x/y") == keys.key(md,
                                                                             "rsm-manifest")
    parsed = parse_object_key(keys.key(md, "log"), "pre/")
    assert (parsed.topic, str(parsed.topic_id), parsed.partition, parsed.start_offset,
            str(parsed.segment_id), parsed.suffix) == (
        "topic1", "lZ6vvmajTWKDBUTV6SQAtQ", 42, 0, "adh9f8BMS4anaUnD8KWfWg", "log")
    # topic names with '-' and ids with '-' / '_'
    parsed = parse_object_key("a-b-c-AAAAAAAAAAAAAAAAAAAA-w/7/00000000000000001234-_-AAAAAAAAAAA"
                              "AAAAAAAAA.indexes")
    assert parsed.topic == "a-b-c" and str(parsed.topic_id) == "AAAAAAAAAAAAAAAAAAAA-w"
    assert parsed.start_offset == 1234 and str(parsed.segment_id).startswith("_-")
    assert parse_object_key("pre/notes.txt", "pre/") is None
    assert parse_object_key(keys.key(md, "log"), "other/") is None


def test_custom_metadata_roundtrip_and_bytes():
    fields = {REMOTE_SIZE: 1234567, OBJECT_PREFIX: "pre/", OBJECT_KEY: "t-x/0/0-y"}
    data = encode_custom_metadata(fields)
    # count 3; tag 0, size 4, zigzag(1234567) = 2469134 in 4 varint bytes; tag 1, size 5,
    # length+1 = 5, "pre/"; tag 2 ...
    assert data[:3] == bytes([3, 0, 4]) and data[3:7] == bytes([0x8E, 0xDA, 0x96, 0x01])
    assert data[7:14] == bytes([1, 5, 5]) + b"pre/"
    assert decode_custom_metadata(data) == fields
    assert encode_custom_metadata({}) == b"" and decode_custom_metadata(b"") == {}
    assert decode_custom_metadata(encode_custom_metadata({REMOTE_SIZE: -5})) == {
        REMOTE_SIZE: -5}


@pytest.mark.parametrize("data,match", [
    (bytes([1, 0, 5, 2]), "claims 5 bytes"),
    (bytes([2, 1, 2, 2, 0x61, 0, 1, 2]), "tags must ascend"),
    (bytes([1, 1, 1, 0]), "null string"),
    (bytes([1, 0, 2, 2, 0]), "uses 1 of its 2"),
    (bytes([1, 0, 1, 2, 9]), "trailing"),
    (bytes([9]), "exceeds"),
    (bytes([1, 0, 11]) + b"\xff" * 11, "claims|longer"),
])
def test_custom_metadata_bad_bytes(data, match):
    with pytest.raises(ValueError, match=match):
        decode_custom_metadata(data)


def test_custom_metadata_skips_unknown_tags():
    data = bytes([2, 1, 2, 2, 0x61, 7, 2, 0xAA, 0xBB])
    assert decode_custom_metadata(data) == {OBJECT_PREFIX: "a"}


# ---- hostile manifests ---------------------------------------------------------------------

def _good() -> dict:
    return {"version": "1",
            "chunkIndex": {"type": "variable", "originalChunkSize": 100,
                           "originalFileSize": 250,
                           "transformedChunks": "KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"},
            "segmentIndexes": {"offset": {"position": 0, "size": 8},
                               "timestamp": {"position": 8, "size": 12},
                               "producerSnapshot": {"position": 20, "size": 0},
                               "leaderEpoch": {"position": 20, "size": 10},
                               "transaction": None},
            "compression": True}


def _frame(raw: bytes, content_size=True) -> str:
    c = zstandard.ZstdCompressor(level=3, write_content_size=content_size)
    return base64.b64encode(c.compress(raw)).decode()


def _with(path, value):
    obj = _good()
    target = obj
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(obj).encode()


HOSTILE = [
    (b"{", "bad JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply|not an object"),
    (b'{"version":"1","version":"1"}', "duplicate key"),
    (b"[]", "not an object"),
    (_with(["version"], 1), "version 1"),
    (_with(["version"], "2"), "version '2'"),
    (_with(["compression"], "true"), "not a boolean"),
    (_with(["extra"], 1), "unknown 'extra'"),
    (_with(["segmentIndexes", "offset", "size"], -1), r"size -1 outside"),
    (_with(["segmentIndexes", "offset", "size"], 2**31), "outside"),
    (_with(["segmentIndexes", "offset", "size"], 1.5), "not an integer"),
    (_with(["segmentIndexes", "offset", "size"], True), "not an integer"),
    (_with(["segmentIndexes", "offset", "position"], 2**31 - 2), "overflows int32"),
    (_with(["segmentIndexes", "transaction"], KeyError), "lacks transaction"),
    (_with(["segmentIndexes", "offset"], None), "only transaction may be"),
    (_with(["chunkIndex", "type"], "other"), "chunkIndex.type"),
    (_with(["chunkIndex", "originalChunkSize"], 0), "originalChunkSize 0"),
    (_with(["chunkIndex", "originalFileSize"], -1), "originalFileSize -1"),
    (_with(["chunkIndex", "originalFileSize"], NaN := float("nan")), "not JSON|not an integer"),
    # counts that lie: the file size says 4 chunks, the codec 3
    (_with(["chunkIndex", "originalFileSize"], 301), "count 3, but .* 4 chunks"),
    (_with(["chunkIndex", "transformedChunks"], "!!"), "not base64"),
    (_with(["chunkIndex", "transformedChunks"], base64.b64encode(b"xyz").decode()),
     "not a zstd frame"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("000000030000000a01000a0000001e"), content_size=False)),
     "does not state its size"),
    # sizes that do not add up: 3 values of 1 byte need 15 bytes
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("000000030000000a01000a0000001eff"))), "need 15 bytes"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("000000030000000a05000a0000001e"))), "bytes per value"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("00000003fffffff601000a0000001e"))), "negative base"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("000000030000000a01000affffffff"))), "negative size"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("ffffffff"))), "negative count"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("000000037fffffff0400000000ffffffff7fffffff"))), "overflows int32"),
    (_with(["chunkIndex", "transformedChunks"],
           _frame(bytes.fromhex("00000003000000000100000000001e"))), "cannot hold"),
    (_with(["encryption"], {"dataKey": "a:b:c", "aad": "AA=="}), "<keyPairId>:<base64>"),
    (_with(["encryption"], {"dataKey": " :AAAA", "aad": "AA=="}), "blank key pair id"),
    (_with(["encryption"], {"dataKey": "k:AAAA", "aad": "", "x": 1}), "unknown 'x'"),
    (_with(["encryption"], {"dataKey": "k:AAAA", "aad": ""}), "aad of 0 bytes"),
]


@pytest.mark.parametrize("data,match", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
def test_hostile_manifests_are_typed_errors_naming_the_object(data, match):
    key = "pre/t-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.rsm-manifest"
    with pytest.raises(CorruptRemoteObjectError, match=match) as info:
        SegmentManifest.parse(data, key)
    assert isinstance(info.value, RemoteStorageError) and isinstance(info.value, ValueError)
    assert info.value.object_key == key and key in str(info.value)


def test_good_hostile_base_parses():
    m = SegmentManifest.parse(json.dumps(_good()).encode(), "k")
    assert m.chunk_index.transformed_sizes.tolist() == [10, 20, 30]
    assert m.segment_indexes.total_size == 30


def test_ten_mib_bomb_is_refused_with_bounded_memory():
    """A frame that claims more than 10 MiB is refused from its header, before anything is
    decompressed; one of just under 10 MiB whose count lies is refused before its sizes
    are decoded."""
    bomb = bytes(MAX_TRANSFORMED_CHUNKS_BYTES + 1)
    over = _with(["chunkIndex", "transformedChunks"], _frame(bomb))
    assert len(over) < 4096
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRemoteObjectError, match="over the 10485760-byte limit"):
            SegmentManifest.parse(over, "k")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    # 10 MiB exactly: count 3 in the header but 10 MiB of values
    lying = bytes.fromhex("000000030000000a01") + bytes(MAX_TRANSFORMED_CHUNKS_BYTES - 9)
    with pytest.raises(CorruptRemoteObjectError, match="need 15 bytes"):
        SegmentManifest.parse(_with(["chunkIndex", "transformedChunks"], _frame(lying)), "k")
    # a count that matches a huge file but not the bytes given
    huge = _with(["chunkIndex", "originalFileSize"], 2**31 - 1)
    huge = json.loads(huge)
    huge["chunkIndex"]["originalChunkSize"] = 1
    huge["chunkIndex"]["transformedChunks"] = _frame((2**31 - 1).to_bytes(4, "big")
                                                     + bytes(4) + b"\1" + bytes(8))
    with pytest.raises(CorruptRemoteObjectError, match="2147483647 values of 1 bytes need"):
        SegmentManifest.parse(json.dumps(huge).encode(), "k")


def test_manifest_size_limit():
    big = json.dumps(_good())[:-1] + ',"remoteLogSegmentMetadata":"' + "x" * (17 << 20) + '"}'
    with pytest.raises(CorruptRemoteObjectError, match="over the 16777216-byte limit"):
        SegmentManifest.parse(big.encode(), "k")


def test_chunk_size_codec_widths():
    for sizes in ([], [7], [5, 5, 5], [1, 300, 2], [0, 70000, 9], [3, 2**24 + 5, 1],
                  [2**31 - 1, 0, 2**31 - 1]):
        raw = encode_chunk_sizes(sizes)
        assert decode_chunk_sizes(raw).tolist() == sizes
    assert encode_chunk_sizes([1, 300, 2])[8] == 2
    assert isinstance(decode_chunk_sizes(encode_chunk_sizes([1, 2])), np.ndarray)
