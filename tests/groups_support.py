"""What the group tests of `serve` share: a small broker (a few untiered partitions, so no
`run` is needed) and `serve` on a fixed port so that clients find it again after a
restart."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from serve_support import BROKER, TOPIC

PARTITIONS = 3
RECORDS = 1200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_group_broker(base: Path, extra: str = "") -> tuple[str, dict[int, int]]:
    """`PARTITIONS` partitions of `TOPIC`, `RECORDS` records each, and a broker file that
    listens on a fixed free port. Returns the broker file and the log end offset of each
    partition."""
    from engine.cli.produce_demo import produce_partition
    from engine.config import load_broker_config
    from engine.log.checkpoint import Uuid
    from engine.log.log_manager import LogManager
    from engine.records import CompressionType

    dirs = {k: base / k for k in ("d1", "d2", "tier")}
    for d in dirs.values():
        d.mkdir(parents=True)
    config = base / "server.properties"
    config.write_text(BROKER.format(**dirs).replace("127.0.0.1:0", f"127.0.0.1:{free_port()}")
                      + "group.min.session.timeout.ms=1000\n" + extra)
    broker = load_broker_config(config)
    topic_id = Uuid.random()
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            produce_partition(manager, TOPIC, p, RECORDS, CompressionType.NONE, seed=3)
        ends = {p: manager.get_log(TOPIC, p).log_end_offset for p in range(PARTITIONS)}
    return str(config), ends


def consumer(bootstrap: str, group: str, **extra):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                     "isolation.level": "read_uncommitted", **extra})


def poll_until(consumers, done, deadline_s: float = 90, on_message=None) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not done():
        for c in consumers:
            for m in c.consume(500, 0.05):
                assert m.error() is None, m.error()
                if on_message is not None:
                    on_message(c, m)
    assert done()
