"""What the group tests of `serve` share: a small broker (a few untiered partitions, so no
`run` is needed) and `serve` on a fixed port so that clients find it again after a
restart."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from broker_support import SERVE, write_broker
from serve_support import TOPIC

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
    from engine.common import Uuid
    from engine.config import load_broker_config
    from engine.log.log_manager import LogManager
    from engine.records import CompressionType

    config, _ = write_broker(base, {**SERVE, "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                                    "group.min.session.timeout.ms": 1000}, extra=extra)
    broker = load_broker_config(config)
    topic_id = Uuid.random()
    with LogManager(broker.log_dirs, broker_config=broker) as manager:
        for p in range(PARTITIONS):
            manager.get_or_create_log(TOPIC, p, topic_id=topic_id)
            produce_partition(manager, TOPIC, p, RECORDS, CompressionType.NONE, seed=3)
        ends = {p: manager.get_log(TOPIC, p).log_end_offset for p in range(PARTITIONS)}
    return config, ends


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


#: the request versions RawClient speaks (a consumer's, KIP-394 and KIP-345 included)
VERSIONS = {2: 9, 3: 12, 8: 9, 11: 9, 12: 4, 13: 5, 14: 5, 15: 5, 18: 3}


class RawClient:
    """One connection speaking the protocol through the project's codec; a request may be
    sent and its answer read later, so that a test drives several members at once."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0
        self.sent: list[tuple[int, int]] = []  # (api key, correlation) awaiting answers

    def send(self, api_key: int, body: dict) -> None:
        from engine.protocol import codec

        self.correlation += 1
        self.sock.sendall(codec.encode_request(api_key, VERSIONS[api_key],
                                               self.correlation, "raw", body))
        self.sent.append((api_key, self.correlation))

    def receive(self) -> dict:
        from engine.protocol import codec

        api_key, correlation = self.sent.pop(0)
        size = struct.unpack(">i", self._exactly(4))[0]
        got, body = codec.decode_response(api_key, VERSIONS[api_key],
                                          self._exactly(size))
        assert got == correlation
        return body

    def call(self, api_key: int, body: dict) -> dict:
        self.send(api_key, body)
        return self.receive()

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()

    # -- the group requests, with the fields a consumer sends ---------------------------------

    def send_join(self, group: str, member_id: str = "", instance_id: str | None = None,
                  metadata: bytes = b"m", rebalance_ms: int = 3000,
                  session_ms: int = 10000) -> None:
        self.send(11, {"group_id": group, "session_timeout_ms": session_ms,
                       "rebalance_timeout_ms": rebalance_ms, "member_id": member_id,
                       "group_instance_id": instance_id, "protocol_type": "consumer",
                       "protocols": [{"name": "range", "metadata": metadata}],
                       "reason": None})

    def join(self, group: str, member_id: str = "", **kw) -> dict:
        self.send_join(group, member_id, **kw)
        return self.receive()

    def send_sync(self, group: str, generation: int, member_id: str,
                  assignments: dict | None = None, instance_id: str | None = None) -> None:
        self.send(14, {"group_id": group, "generation_id": generation,
                       "member_id": member_id, "group_instance_id": instance_id,
                       "protocol_type": "consumer", "protocol_name": "range",
                       "assignments": [{"member_id": m, "assignment": a}
                                       for m, a in (assignments or {}).items()]})

    def sync(self, group: str, generation: int, member_id: str, **kw) -> dict:
        self.send_sync(group, generation, member_id, **kw)
        return self.receive()

    def heartbeat(self, group: str, generation: int, member_id: str,
                  instance_id: str | None = None) -> int:
        return self.call(12, {"group_id": group, "generation_id": generation,
                              "member_id": member_id,
                              "group_instance_id": instance_id})["error_code"]

    def describe(self, group: str) -> dict:
        return self.call(15, {"groups": [group],
                              "include_authorized_operations": False})["groups"][0]
