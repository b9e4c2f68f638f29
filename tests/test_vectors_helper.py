"""Tests of tests/vectors.py: the helper that finds records blobs in the conformance vectors.

Facts asserted here come from the folder MANIFESTs (topics, partitions, correlation ids,
size prefixes, high watermarks) or from reading the bytes by hand (sarama's v11/v12 bodies).
No engine code is involved.
"""

import struct

import pytest
import vectors as V

if not V.VECTORS.is_dir():
    pytest.fail(f"conformance vectors not found at {V.VECTORS}", pytrace=False)

def test_vectors_fixture_points_at_shared_vectors(VECTORS):
    assert (V.REPO_ROOT / ".." / "shared" / "vectors").resolve() == VECTORS
    for folder in V.FOLDERS:
        assert (VECTORS / folder / "MANIFEST.md").is_file(), folder


def test_every_file_of_the_record_folders_is_classified():
    kinds = {}
    for relpath in V.vector_files():
        kind, _ = V.kind_of(relpath)
        kinds.setdefault(kind, []).append(relpath)
    assert len(kinds["fetch-response"]) == 6 + 11 + 23 + 10  # rust, go, kafkajs, sarama
    assert len(kinds["produce-request"]) == 8
    assert len(kinds["legacy-message"]) == 9
    assert len(kinds["control-record"]) == 5
    assert len(kinds["record-body"]) == len(kinds["crc-payload"]) == 1
    assert kinds["snappy-stream"] == ["kafka-rust-test-data/fetch1.snappy.chunked.4k"]
    assert sorted(p for p in kinds["records"] if p.endswith(".log")) == [
        f"codecrafters-kafka-tester-kraft-datadir/{c}/kraft-combined-logs/{t}/"
        "00000000000000000000.log"
        for c in ("510714e", "e856b9a") for t in ("__cluster_metadata-0", "foo-0")]
    with pytest.raises(V.VectorFormatError):
        V.kind_of("sarama-literals/some_new_file.bin")


@pytest.mark.parametrize("relpath", V.record_vector_files(), ids=V.short_id)
def test_blob_bytes_are_the_file_bytes(relpath):
    """Each blob is a verbatim slice of its file at `position`, after any synthetic frame."""
    data = V.read_vector_bytes(relpath)
    for blob in V.load_blobs(relpath):
        own = blob.data[blob.synthetic_prefix:]
        assert data[blob.position:blob.position + len(own)] == own
        assert bool(blob.synthetic_prefix) == bool(blob.note)
        framing = V.scan_entry_framing(blob.data)
        assert framing.valid_bytes + framing.partial_bytes == len(blob.data)


@pytest.mark.parametrize("relpath", [p for p in V.vector_files("kafkajs-fixtures")
                                     if p.endswith(".bin")])
def test_kafkajs_json_and_bin_hold_the_same_bytes(relpath):
    json_path = relpath[:-len(".bin")] + ".json"
    assert V.read_kafkajs_json(json_path) == V.read_vector_bytes(relpath)


def test_kafka_rust_prefix_and_partitions():
    """[int32 correlationId][Fetch v0 body], topic my-topic, 1 partition (README.md)."""
    lengths = {"fetch1.mytopic.1p.gzip.kafka.0821": (2, 42, 6025),
               "fetch1.mytopic.1p.nocompression.kafka.0821": (2, 42, 12578),
               "fetch1.mytopic.1p.snappy.kafka.0821": (2, 42, 11316),
               "fetch1.mytopic.1p.snappy.kafka.0822": (2, 42, 8764),
               "fetch2.mytopic.nocompression.kafka.0900": (5, 1, 497),
               "fetch2.mytopic.nocompression.invalid_crc.kafka.0900": (5, 1, 497)}
    for name, (corr, hw, size) in lengths.items():
        (blob,) = V.load_blobs(f"kafka-rust-test-data/{name}")
        assert (blob.topic, blob.partition, blob.fetch_version) == ("my-topic", 0, 0)
        assert (blob.correlation_id, blob.high_watermark, len(blob.data)) == (corr, hw, size)
        # v0 body: topics(4) name(2+8) partitions(4) partition(4) error(2) hw(8) size(4)
        assert blob.position == 4 + 4 + 10 + 4 + 4 + 2 + 8 + 4
        assert blob.position + len(blob.data) == len(V.read_vector_bytes(blob.file))


_GO_TOPICS = {"v1-v1": "test-edgy", "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": "test-88",
              "v1c-v1-v1c": "test-breezy", "v1c-v1c": "test-gutsy", "v2-v2": "test-lucid",
              "v2b-v1": "test-feisty", "v2bc-v1-v1c": "test-hardy", "v2bc-v1": "test-hardy",
              "v2bc-v1c": "test-karmic", "v2c-v2-v2c": "test-natty",
              "v2c-v2c": "test-oneiric"}


# records per file, from the MANIFEST's expected key sequences (= high watermark: offsets 0..n-1)
_GO_RECORDS = {"v2b-v1": 4, "v2bc-v1c": 4, "v2bc-v1": 4, "v2bc-v1-v1c": 6, "v1-v1": 4,
               "v1c-v1c": 4, "v1c-v1-v1c": 6, "v2-v2": 4, "v2c-v2c": 4, "v2c-v2-v2c": 6,
               "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": 20}


@pytest.mark.parametrize("name", sorted(_GO_TOPICS))
def test_kafka_go_hex_is_a_sized_fetch_v10(name):
    relpath = f"kafka-go-fixtures/{name}.hex"
    text = (V.VECTORS / relpath).read_text().strip()
    data = V.read_vector_bytes(relpath)
    assert len(text) == 2 * len(data)
    size, corr = struct.unpack_from(">ii", data)
    assert (size, corr) == (len(data) - 4, 10)
    response = V.load_fetch_response(relpath)
    assert (response.throttle_time_ms, response.error_code) == (0, 0)
    (blob,) = V.load_blobs(relpath)
    assert (blob.topic, blob.partition, blob.fetch_version) == (_GO_TOPICS[name], 0, 10)
    fp = blob.fetch_partition
    hw = _GO_RECORDS[name]
    assert (fp.high_watermark, fp.last_stable_offset, fp.log_start_offset) == (hw, hw, 0)
    assert fp.aborted_transactions is None  # null array in these captures
    assert blob.position + len(blob.data) == len(data)


def test_kafkajs_fetch_partitions():
    def parts(name):
        return [(b.topic, b.partition, len(b.data))
                for b in V.load_blobs(f"kafkajs-fixtures/requests_fetch__{name}.bin")]
    assert parts("v2_response_partial_messages_many_partitions") == [
        ("topic-partial-message", p, 1024) for p in (9, 3, 6, 0)]
    assert parts("v4_response_snappy") == [("topic-test", 3, 110), ("topic-test", 0, 0)]
    assert parts("v2_response_index_out_of_range") == [("test-topic-index-out-of-range", 1, 138)]
    assert parts("v4_response_mixed_formats") == [("test-mixed-message-formats", 0, 160194)]
    for version in range(12):
        for blob in V.load_blobs(f"kafkajs-fixtures/requests_fetch__v{version}_response.bin"):
            assert blob.fetch_version == version
            fp = blob.fetch_partition
            assert (fp.last_stable_offset is None) == (version < 4)
            assert (fp.log_start_offset is None) == (version < 5)
            assert (fp.preferred_read_replica is None) == (version < 11)
            assert fp.aborted_transactions == (None if version < 4 else ())
    v7 = V.load_fetch_response("kafkajs-fixtures/requests_fetch__v7_response.bin")
    assert (v7.throttle_time_ms, v7.error_code, v7.session_id) == (0, 0, 0)


def test_kafkajs_produce_requests():
    expected = {"v2_request": (None, -1, 267), "v2_request_gzip_darwin": (None, -1, 229),
                "v2_request_gzip_linux": (None, -1, 229), "v3_request": (None, -1, 270),
                "v4_request": (None, -1, 940), "v5_request": (None, -1, 916),
                "v6_request": (None, 1, 1041), "v7_request": (None, -1, 1041)}
    for name, (txn_id, acks, size) in expected.items():
        relpath = f"kafkajs-fixtures/requests_produce__{name}.bin"
        version = int(name[1])
        request = V.parse_produce_request(V.read_vector_bytes(relpath), version)
        assert (request.transactional_id, request.acks, request.timeout_ms) == (txn_id, acks, 30000)
        (blob,) = V.load_blobs(relpath)
        assert (blob.partition, blob.produce_version, len(blob.data)) == (0, version, size)
        assert blob.topic.startswith("test-topic-")


def test_kafkajs_size_prefixed_message_sets():
    for name, size in [("messageSet__messages_v0_GZIP.bin", 107),
                       ("messageSet__messages_v0_uncompressed.json.bin", 129)]:
        (blob,) = V.load_blobs(f"kafkajs-fixtures/{name}")
        assert (blob.position, len(blob.data)) == (4, size)
        assert V.scan_entry_framing(blob.data).partial_bytes == 0


def test_sarama_fetch_bodies_by_hand():
    """Values read from the bytes: v11/v12 preferred replica 3, session id 0xac, error 2;
    v12 partition tagged fields 0 (diverging epoch) and 1 (current leader)."""
    def load(name):
        return V.load_fetch_response(f"sarama-literals/fetch_response_test__{name}.bin")
    assert load("emptyFetchResponse_L15").topics == ()
    v11 = load("preferredReplicaFetchResponseV11_L183")
    assert (v11.throttle_time_ms, v11.error_code, v11.session_id) == (0, 2, 0xAC)
    (p11,) = v11.topics[0].partitions
    assert (p11.partition, p11.error_code, p11.preferred_read_replica) == (5, 1, 3)
    assert (p11.high_watermark, p11.last_stable_offset, p11.log_start_offset) == (
        0x10101010, 0x10101009, 0x01010101)
    v12 = load("preferredReplicaFetchResponseV12_L209")
    assert v12.topics[0].topic == "topic" and v12.session_id == 0xAC
    (p12,) = v12.topics[0].partitions
    assert p12.preferred_read_replica == 3 and p12.records == b""
    assert p12.tagged_fields == {
        0: struct.pack(">iqb", 0x77, 0x0102030405060708, 0),
        1: struct.pack(">iib", 9, 0x88, 0)}
    aborted = load("abortedTxnFetchResponseV12_L239")
    (pa,) = aborted.topics[0].partitions
    assert pa.aborted_transactions == (V.AbortedTransaction(producer_id=1000, first_offset=66),)
    assert pa.preferred_read_replica == -1 and pa.records == b""
    one = load("oneMessageFetchResponse_L19")
    (po,) = one.topics[0].partitions
    assert (po.error_code, po.high_watermark, len(po.records)) == (1, 0x10101010, 28)


def test_sarama_blob_sizes():
    sizes = {"oneMessageFetchResponse_L19": 28, "overflowMessageFetchResponse_L38": 48,
             "oneMessageFetchResponseV4_L161": 28, "oneRecordFetchResponse_L62": 82,
             "partialFetchResponse_L99": 64, "emptyRecordsFetchResponsev11_L130": 61,
             "preferredReplicaFetchResponseV11_L183": 28,
             "preferredReplicaFetchResponseV12_L209": 0, "abortedTxnFetchResponseV12_L239": 0}
    for name, size in sizes.items():
        (blob,) = V.load_blobs(f"sarama-literals/fetch_response_test__{name}.bin")
        assert (blob.topic, blob.partition, len(blob.data)) == ("topic", 5, size)
    assert V.load_blobs("sarama-literals/fetch_response_test__emptyFetchResponse_L15.bin") == []


def test_aborted_transactions_are_exposed_on_blobs():
    (blob,) = V.load_blobs(
        "sarama-literals/fetch_response_test__abortedTxnFetchResponseV12_L239.bin")
    assert blob.aborted_transactions == (V.AbortedTransaction(1000, 66),)
    (blob,) = V.load_blobs("kafkajs-fixtures/requests_fetch__v4_response.bin")
    assert blob.aborted_transactions == ()
    (blob,) = V.load_blobs("kafka-python-literals/test_records__record_batch_data_v2.bin")
    assert blob.aborted_transactions is None


def test_framing_scan_of_known_blobs():
    v2 = V.scan_entry_framing(V.load_blob(
        "kafka-python-literals/test_records__record_batch_data_v2.bin").data)
    assert [(e.position, e.size, e.magic, e.offset) for e in v2.entries] == [
        (0, 71, 2, 0), (71, 76, 2, 1), (147, 71, 2, 3), (218, 81, 2, 0)]
    mixed = V.scan_entry_framing(V.load_blob(
        "kafkajs-fixtures/requests_fetch__v4_response_mixed_formats.bin").data)
    assert [e.magic for e in mixed.entries] == [1] * 1611 + [2] * 3
    assert [e.position for e in mixed.entries[-3:]] == [120499, 132075, 135233]
    cut = V.scan_entry_framing(V.load_blob(
        "kafkajs-fixtures/requests_fetch__v2_response_index_out_of_range.bin").data)
    assert (len(cut.entries), cut.valid_bytes, cut.partial_bytes) == (3, 129, 9)
    assert V.scan_entry_framing(b"\x00" * 16) == V.FramingScan((), 0, 16)


def test_synthetic_frames():
    msg = (V.VECTORS / "sarama-literals/message_test__emptyMessage_L11.bin").read_bytes()
    assert V.wrap_legacy_message(msg, 7) == struct.pack(">qi", 7, 14) + msg
    payload = (V.VECTORS / "kafkajs-fixtures/recordBatch_crc32C__crcPayload.bin").read_bytes()
    assert V.crc32c(payload) == 818496390  # the CRC the kafkajs fixture states
    batch = V.batch_from_crc_payload(payload, 818496390)
    assert struct.unpack_from(">qiibI", batch) == (0, len(batch) - 12, 0, 2, 818496390)
    body = (V.VECTORS / "kafkajs-fixtures/recordBatch__v0_record.bin").read_bytes()
    wrapped = V.wrap_record_body_in_batch(body)
    assert wrapped[61:63] == V.encode_varint(len(body)) == b"\xd6\x01"
    assert V.crc32c(wrapped[21:]) == struct.unpack_from(">I", wrapped, 17)[0]
    assert struct.unpack_from(">i", wrapped, 57)[0] == 1  # record count


def test_encode_varint():
    assert [V.encode_varint(n) for n in (0, -1, 1, 63, -64, 64, 107)] == [
        b"\x00", b"\x01", b"\x02", b"\x7e", b"\x7f", b"\x80\x01", b"\xd6\x01"]


def test_xerial_chunks_of_the_kafka_rust_stream():
    import cramjam
    stream = (V.VECTORS / "kafka-rust-test-data/fetch1.snappy.chunked.4k").read_bytes()
    chunks = V.xerial_snappy_chunks(stream)
    plain = [bytes(cramjam.snappy.decompress_raw(c)) for c in chunks]
    assert all(len(p) == 4096 for p in plain[:-1]) and 0 < len(plain[-1]) <= 4096
    assert b"".join(plain) == (V.VECTORS / "kafka-rust-test-data/fetch1.txt").read_bytes()
    with pytest.raises(V.VectorFormatError):
        V.xerial_snappy_chunks(stream[:-1])
    with pytest.raises(V.VectorFormatError):
        V.xerial_snappy_chunks(b"not xerial at all")


def test_short_or_wrong_bodies_are_rejected():
    body = V.read_vector_bytes("kafkajs-fixtures/requests_fetch__v4_response.bin")
    with pytest.raises(V.VectorFormatError):
        V.parse_fetch_response(body[:-1], 4)
    # parsed as the wrong version, the body is not consumed exactly
    assert V.parse_fetch_response(body, 3).size != len(body)
    with pytest.raises(V.VectorFormatError):
        V.parse_fetch_response(body, 17)
    with pytest.raises(V.VectorFormatError):
        V.parse_produce_request(b"\x00", 3)


def test_flexible_fetch_with_topic_ids():
    """v13+: a 16-byte topic id replaces the name (built by hand, no vector has one)."""
    topic_id = bytes(range(16))
    partition = (struct.pack(">ihqqq", 1, 0, 5, 5, 0) + b"\x01"    # no aborted transactions
                 + struct.pack(">i", -1) + b"\x03ab" + b"\x00")    # records b"ab", no tags
    body = (struct.pack(">ihi", 0, 0, 7) + b"\x02" + topic_id + b"\x02" + partition
            + b"\x00" + b"\x00")
    response = V.parse_fetch_response(body, 13)
    assert response.size == len(body)
    (topic,) = response.topics
    assert (topic.topic, topic.topic_id) == (None, topic_id)
    (p,) = topic.partitions
    assert (p.partition, p.high_watermark, p.records) == (1, 5, b"ab")
    assert p.records_position == len(body) - 2 - 1 - 2


def test_all_blobs_ids_are_unique():
    ids = [b.id for b in V.all_blobs()]
    assert len(ids) == len(set(ids))
    # pytest keeps string ids up to 100 characters; file ids are used for parametrization
    assert all(len(V.short_id(f)) <= 100 for f in V.record_vector_files())
