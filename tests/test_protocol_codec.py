"""The generic codec of engine.protocol: every API and version round-trips, bytes match the
wire rules written out by hand, and malformed frames (truncated, lying lengths and counts,
bad varints, unknown or overrunning tags) are typed errors."""

from __future__ import annotations

import struct

import pytest

from engine.protocol import codec
from engine.protocol.messages import API_VERSIONS


def _join(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


@pytest.mark.parametrize("api_key", sorted(API_VERSIONS))
def test_every_version_round_trips_with_defaults(api_key):
    _, lo, hi, _ = API_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        frame = codec.encode_request(api_key, version, 42, "client", {})
        req = codec.decode_request(frame[4:])
        assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (
            api_key, version, 42, "client")
        assert codec.encode_request(api_key, version, 42, "client", req.body) == frame
        resp = _join(codec.encode_response(api_key, version, 9, {}))
        assert struct.unpack(">i", resp[:4])[0] == len(resp) - 4
        corr, body = codec.decode_response(api_key, version, resp[4:])
        assert corr == 9
        assert _join(codec.encode_response(api_key, version, 9, body)) == resp


def test_fetch_v4_request_bytes_match_the_classic_layout():
    body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1000,
            "isolation_level": 1,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 3, "fetch_offset": 77, "partition_max_bytes": 65536}]}]}
    frame = codec.encode_request(1, 4, 5, "c", body)
    want = (struct.pack(">hhih", 1, 4, 5, 1) + b"c"
            + struct.pack(">iiiib", -1, 500, 1, 1000, 1)
            + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iiqi", 1, 3, 77, 65536))
    assert frame == struct.pack(">i", len(want)) + want
    assert codec.decode_request(frame[4:]).body["topics"][0]["partitions"][0][
        "fetch_offset"] == 77


def test_flexible_metadata_request_uses_compact_fields_and_header_v2():
    topic_id = bytes(range(16))
    frame = codec.encode_request(3, 12, 1, None, {
        "topics": [{"topic_id": topic_id, "name": "ab"}],
        "include_topic_authorized_operations": True})
    want = (struct.pack(">hhih", 3, 12, 1, -1) + b"\x00"      # header v2: null client id
            + b"\x02" + topic_id + b"\x03ab" + b"\x00"         # one topic, compact string
            + b"\x01" + b"\x01" + b"\x00")                     # auto create, auth ops, tags
    assert frame[4:] == want


def test_api_versions_response_keeps_header_v0_in_flexible_versions():
    resp = _join(codec.encode_response(18, 3, 7, {"api_keys": [
        {"api_key": 1, "min_version": 4, "max_version": 16}]}))
    # size, correlation id (no header tags), error, compact array of one, its tags,
    # throttle, top-level tags
    assert resp[4:] == (struct.pack(">ih", 7, 0) + b"\x02" + struct.pack(">hhh", 1, 4, 16)
                        + b"\x00" + struct.pack(">i", 0) + b"\x00")


def test_records_are_passed_through_without_a_copy():
    records = memoryview(bytearray(b"R" * 1000))
    parts = codec.encode_response(1, 16, 1, {"responses": [{"partitions": [
        {"partition_index": 0, "records": records}]}]})
    assert any(p is records for p in parts)
    _, body = codec.decode_response(1, 16, _join(parts)[4:])
    assert bytes(body["responses"][0]["partitions"][0]["records"]) == b"R" * 1000


def test_tagged_fields_are_written_only_when_not_default_and_unknown_ones_skipped():
    plain = _join(codec.encode_response(1, 12, 1, {"responses": [{"partitions": [{}]}]}))
    led = _join(codec.encode_response(1, 12, 1, {"responses": [{"partitions": [
        {"current_leader": {"leader_id": 1, "leader_epoch": 2}}]}]}))
    assert len(led) > len(plain)
    _, body = codec.decode_response(1, 12, led[4:])
    assert body["responses"][0]["partitions"][0]["current_leader"] == {
        "leader_id": 1, "leader_epoch": 2}
    # an unknown tag (9) in the request's top-level tagged section is skipped
    frame = codec.encode_request(18, 3, 1, "c", {"client_software_name": "x"})
    assert frame[-1:] == b"\x00"
    patched = frame[4:-1] + b"\x01\x09\x03abc"
    assert codec.decode_request(patched).body["client_software_name"] == "x"


def _fetch_v16() -> bytes:
    return codec.encode_request(1, 16, 3, "c", {
        "max_wait_ms": 10, "topics": [{"topic_id": b"\x01" * 16, "partitions": [
            {"partition": 0, "fetch_offset": 1}, {"partition": 1, "fetch_offset": 2}]}],
        "rack_id": "r"})[4:]


def test_every_truncation_is_an_invalid_request():
    frame = _fetch_v16()
    for n in range(len(frame)):
        with pytest.raises(codec.InvalidRequestError):
            codec.decode_request(frame[:n])
    # bytes after the message are ignored, as Kafka ignores them
    assert codec.decode_request(frame + b"\x00\x00\x00").body == codec.decode_request(
        frame).body


def test_lying_counts_lengths_and_varints_are_errors_before_allocation():
    header = struct.pack(">hhih", 1, 4, 1, 0)
    # a topics count of 2**31-1 with a few bytes behind it
    with pytest.raises(codec.InvalidRequestError, match="array count 2147483647"):
        codec.decode_request(header + struct.pack(">iiiib", -1, 0, 0, 0, 0)
                             + struct.pack(">i", 2**31 - 1) + b"\x00" * 8)
    with pytest.raises(codec.InvalidRequestError, match="array count -7"):
        codec.decode_request(header + struct.pack(">iiiib", -1, 0, 0, 0, 0)
                             + struct.pack(">i", -7))
    # a client id length past the end
    with pytest.raises(codec.InvalidRequestError, match="ClientId"):
        codec.decode_request(struct.pack(">hhih", 1, 4, 1, 500) + b"abc")
    flexible = codec.encode_request(18, 3, 1, "c", {})[4:]
    with pytest.raises(codec.InvalidRequestError, match="varint longer than 5 bytes"):
        codec.decode_request(flexible[:-1] + b"\xff" * 6)
    # a tagged field whose size is larger than its value needs
    with pytest.raises(codec.InvalidRequestError, match="left over"):
        codec.decode_request(codec.encode_request(1, 12, 1, "c", {})[4:-1]
                             + b"\x01\x00\x03\x02xy")  # tag 0 (ClusterId) "x" + 1 spare byte
    with pytest.raises(codec.InvalidRequestError, match="null not allowed"):
        codec.decode_request(struct.pack(">hhih", 10, 0, 1, -1) + struct.pack(">h", -1))


def test_unknown_keys_and_versions_raise_with_the_header():
    with pytest.raises(codec.UnsupportedVersionError) as info:
        codec.decode_request(struct.pack(">hhih", 999, 0, 77, -1))
    assert (info.value.api_key, info.value.correlation_id) == (999, 77)
    with pytest.raises(codec.UnsupportedVersionError, match="ApiVersions v9"):
        codec.decode_request(struct.pack(">hhih", 18, 9, 78, -1))
    with pytest.raises(codec.InvalidRequestError, match="shorter than a header"):
        codec.decode_request(b"\x00\x01")


def test_null_in_a_version_without_null_is_written_empty():
    resp = _join(codec.encode_response(11, 5, 1, {"error_code": 79, "protocol_name": None,
                                                  "members": None}))
    _, body = codec.decode_response(11, 5, resp[4:])
    assert (body["protocol_name"], body["members"]) == ("", [])
    resp = _join(codec.encode_response(11, 7, 1, {"protocol_name": None}))
    assert codec.decode_response(11, 7, resp[4:])[1]["protocol_name"] is None


def test_a_field_nullable_in_later_versions_is_null_where_absent():
    """Kafka's GroupInstanceId (`"default": "null"`): an OffsetCommit v3, which has no such
    field, decodes with None, not "" (a dynamic member, not a static one named "")."""
    from engine.protocol import codec

    body = {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
            "retention_time_ms": -1, "topics": []}
    for version, want in ((3, None), (7, "instance-1")):
        sent = dict(body, group_instance_id="instance-1") if version >= 7 else body
        frame = codec.encode_request(8, version, 1, "c", sent)
        assert codec.decode_request(memoryview(frame)[4:]).body["group_instance_id"] == want
