"""Fuzz target for the request decoder of `serve` (atheris, i.e. libFuzzer driving Python).

Long run, from the repository root (seeds are written into the corpus folder when it is empty;
build/ is ignored by git):

    python tests/fuzz/fuzz_requests.py -max_total_time=3600 -rss_limit_mb=2048 -timeout=10 \\
        build/fuzz-requests-corpus/

Each input is a request frame without its size, as the server hands it to
`engine.protocol.codec.decode_request`. The only exceptions expected are InvalidRequestError
(with a position inside the input) and UnsupportedVersionError; a request that decodes must
encode again and decode to the same body (the table-driven encoder and decoder agree).
Anything else is a finding: another exception type, a crash, a hang (-timeout: a lying count
that loops) or memory growth past -rss_limit_mb (a lying length or count that allocates).

Seeds: a request of every API and version `serve` speaks, with defaults and with filled
arrays, strings, tagged fields and records. The codec is pure Python and instrumented
(`atheris.instrument_imports`), so libFuzzer gets coverage of every field path.
"""

from __future__ import annotations

import os
import sys

import atheris

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with atheris.instrument_imports(include=["engine.protocol"]):
    from engine.protocol import codec
    from engine.protocol.messages import API_VERSIONS

_FILLED = {
    0: {"acks": -1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 1, "records": b"\x00" * 70}]}]},
    1: {"max_wait_ms": 5, "min_bytes": 1, "isolation_level": 1, "topics": [
        {"topic": "orders", "topic_id": b"\x01" * 16, "partitions": [
            {"partition": 0, "fetch_offset": 12, "partition_max_bytes": 1000}]}],
        "forgotten_topics_data": [{"topic": "x", "topic_id": b"\x02" * 16,
                                   "partitions": [1, 2]}],
        "cluster_id": "c", "rack_id": "r"},
    2: {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -5}]}]},
    3: {"topics": [{"name": "t", "topic_id": b"\x03" * 16}]},
    8: {"group_id": "g", "member_id": "m", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_metadata": "x"}]}]},
    9: {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}],
        "groups": [{"group_id": "g", "topics": None}]},
    10: {"key": "g", "coordinator_keys": ["g", "h"]},
    11: {"group_id": "g", "session_timeout_ms": 6000, "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b"\x00\x01"}], "reason": "r"},
    12: {"group_id": "g", "generation_id": 1, "member_id": "m"},
    13: {"group_id": "g", "member_id": "m", "members": [{"member_id": "m"}]},
    14: {"group_id": "g", "assignments": [{"member_id": "m", "assignment": b"\x00"}]},
    15: {"groups": ["g", "h"]},
    16: {"states_filter": ["Stable"], "types_filter": ["classic"]},
    17: {"mechanism": "SCRAM-SHA-256"},
    36: {"auth_bytes": b"n,,n=user,r=nonce"},
    18: {"client_software_name": "n", "client_software_version": "1"},
    32: {"resources": [{"resource_type": 2, "resource_name": "t",
                        "configuration_keys": ["a"]}]},
}


def seeds():
    for key, (_, lo, hi, _) in sorted(API_VERSIONS.items()):
        for version in range(lo, hi + 1):
            yield codec.encode_request(key, version, 7, "fuzz", {})[4:]
            yield codec.encode_request(key, version, 8, None, _FILLED[key])[4:]


def one_input(data: bytes) -> None:
    try:
        req = codec.decode_request(data)
    except codec.InvalidRequestError as exc:
        if exc.position is None or not 0 <= exc.position <= len(data):
            raise AssertionError(f"error without a position in the input: {exc}") from None
        return
    except codec.UnsupportedVersionError:
        return
    frame = codec.encode_request(req.api_key, req.api_version, req.correlation_id,
                                 req.client_id, req.body)
    again = codec.decode_request(frame[4:])
    if again.body != req.body or again.client_id != req.client_id:
        raise AssertionError(f"re-encoded request differs: {req} -> {again}")


def _write_seeds(argv):
    dirs = [a for a in argv[1:] if not a.startswith("-")]
    if not dirs:
        return
    corpus = dirs[0]
    os.makedirs(corpus, exist_ok=True)
    if os.listdir(corpus):
        return
    for i, seed in enumerate(seeds()):
        with open(os.path.join(corpus, f"seed-{i:03d}"), "wb") as f:
            f.write(seed)


def TestOneInput(data: bytes) -> None:
    one_input(data)


def main(argv):
    _write_seeds(argv)
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
