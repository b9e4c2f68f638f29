"""Committed offsets on `serve` with real clients: metadata larger than
`offset.metadata.max.bytes` is refused per partition and stored nowhere."""

from __future__ import annotations

import pytest
from groups_support import build_group_broker
from serve_support import TOPIC, ServeProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    return build_group_broker(tmp_path_factory.mktemp("offsets"))


@pytest.fixture
def serve(broker):
    procs = []

    def start():
        procs.append(ServeProcess(broker[0]))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        assert "Traceback" not in proc.output(), proc.output()


def test_metadata_over_offset_metadata_max_bytes_is_refused_and_stored_nowhere(serve):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import OffsetMetadataTooLargeError
    from kafka.structs import OffsetAndMetadata

    server = serve()
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="meta",
                      enable_auto_commit=False)
    tps = [TopicPartition(TOPIC, p) for p in range(3)]
    try:
        # 4096 UTF-16 units each: at the limit
        c.commit({tps[0]: OffsetAndMetadata(5, "m" * 4096, -1),
                  tps[1]: OffsetAndMetadata(6, "\U0001f600" * 2048, -1)})
        with pytest.raises(OffsetMetadataTooLargeError):
            c.commit({tps[0]: OffsetAndMetadata(50, "m" * 4097, -1),
                      tps[2]: OffsetAndMetadata(7, "ok", -1)})
        with pytest.raises(OffsetMetadataTooLargeError):
            c.commit({tps[1]: OffsetAndMetadata(60, "\U0001f600" * 2048 + "x", -1)})
        got = {tp.partition: c.committed(tp, metadata=True) for tp in tps}
    finally:
        c.close()
    assert {p: (o.offset, o.metadata) for p, o in got.items()} == {
        0: (5, "m" * 4096), 1: (6, "\U0001f600" * 2048), 2: (7, "ok")}
