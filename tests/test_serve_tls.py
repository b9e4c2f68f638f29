"""SSL listeners of `serve` with Kafka's PEM keystore configs: librdkafka and kafka-python
consume over TLS beside a PLAINTEXT listener (Metadata gives each client the port of the
listener it came on), a client that does not trust the certificate and a plaintext client on
the TLS port get nothing, and an inline PEM keystore (certificate chain + key) works too."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
from serve_support import TOPIC, ServeProcess, build_small_broker, make_pki

from engine.protocol import codec

DEADLINE_S = 60


def _read_frame(sock) -> bytes:
    def exactly(n):
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "closed by the server"
            out += chunk
        return out

    return exactly(struct.unpack(">i", exactly(4))[0])


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, pki):
    config = build_small_broker(tmp_path_factory.mktemp("tls"), (
        "ssl.keystore.type=PEM\nssl.truststore.type=PEM\n"
        f"ssl.keystore.location={pki / 'keystore.pem'}\n"), records=2000)
    text = Path(config).read_text().replace(
        "listeners=PLAINTEXT://127.0.0.1:0",
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    Path(config).write_text(text)
    proc = ServeProcess(config, listeners=2)
    yield proc
    assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()


def test_librdkafka_and_kafka_python_consume_over_tls(tls_server, pki):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    ssl_port = tls_server.ports["SSL"]
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ssl_port}",
                         "security.protocol": "SSL", "ssl.ca.location": str(pki / "ca.pem"),
                         "group.id": "tls", "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    md = consumer.list_topics(timeout=30)
    assert [b.port for b in md.brokers.values()] == [ssl_port]
    got = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 2000 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.offset())
    finally:
        consumer.close()
    assert len(got) == 2000 and got == sorted(got)
    kp = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{ssl_port}", security_protocol="SSL",
                       ssl_cafile=str(pki / "ca.pem"), enable_auto_commit=False)
    try:
        tp = KTopicPartition(TOPIC, 0)
        kp.assign([tp])
        kp.seek_to_beginning(tp)
        records = []
        deadline = time.monotonic() + DEADLINE_S
        while not records and time.monotonic() < deadline:
            records = kp.poll(timeout_ms=500).get(tp, [])
        assert records and records[0].offset == got[0]
    finally:
        kp.close()


def test_untrusted_and_plaintext_clients_get_nothing(tls_server, pki):
    ssl_port = tls_server.ports["SSL"]
    untrusted = ssl.create_default_context()  # the system CAs: not the test CA
    with socket.create_connection(("127.0.0.1", ssl_port), timeout=30) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        untrusted.wrap_socket(raw, server_hostname="localhost")
    with socket.create_connection(("127.0.0.1", ssl_port), timeout=30) as raw:
        raw.sendall(codec.encode_request(18, 3, 1, "t", {}))
        data = b""
        try:
            while chunk := raw.recv(4096):
                data += chunk
        except ConnectionResetError:
            pass
        assert not data.startswith(struct.pack(">i", len(data) - 4))  # no Kafka answer
    trusted = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with socket.create_connection(("127.0.0.1", ssl_port), timeout=30) as raw, \
            trusted.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(codec.encode_request(18, 3, 2, "t", {}))
        assert codec.decode_response(18, 3, _read_frame(s))[1]["error_code"] == 0


def test_inline_pem_keystore_and_a_bad_one(tmp_path, pki):
    chain = (pki / "server.pem").read_text().strip().replace("\n", "\\n")
    key = (pki / "server.key").read_text().strip().replace("\n", "\\n")
    config = build_small_broker(tmp_path, (
        "ssl.keystore.type=PEM\nssl.truststore.type=PEM\n"
        f"ssl.keystore.certificate.chain={chain}\nssl.keystore.key={key}\n"), records=10)
    Path(config).write_text(Path(config).read_text().replace(
        "listeners=PLAINTEXT://127.0.0.1:0", "listeners=SSL://127.0.0.1:0"))
    proc = ServeProcess(config)
    try:
        trusted = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as raw, \
                trusted.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(codec.encode_request(18, 0, 3, "t", {}))
            assert codec.decode_response(18, 0, _read_frame(s))[1]["error_code"] == 0
    finally:
        assert proc.stop() == 0, proc.output()
    # a key that is not PEM: one error line, and the key is not shown
    Path(config).write_text(Path(config).read_text().replace(key, "bm90LWEta2V5"))
    out = subprocess.run([*ServeProcess.command(config)], capture_output=True, text=True,
                         timeout=120, check=False, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("error: "), out.stderr
    assert "ssl.keystore.key" in out.stderr and "bm90LWEta2V5" not in out.stderr


def test_a_fetch_through_sendfile_equals_the_views_over_tls(tls_server, pki):
    """The same Fetch on the PLAINTEXT listener (local records sent with sendfile) and on
    the SSL one (the same records written from their views): byte-equal responses."""
    def call(sock, api_key, version, body):
        sock.sendall(codec.encode_request(api_key, version, 1, "t", body))
        return _read_frame(sock)

    trusted = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with socket.create_connection(("127.0.0.1", tls_server.ports["PLAINTEXT"])) as plain, \
            socket.create_connection(("127.0.0.1", tls_server.ports["SSL"])) as raw, \
            trusted.wrap_socket(raw, server_hostname="localhost") as tls:
        offsets = codec.decode_response(2, 1, call(plain, 2, 1, {
            "replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "timestamp": -4}]}]}))[1]
        local = offsets["topics"][0]["partitions"][0]["offset"]  # earliest local
        fetch = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                     {"partition": 0, "fetch_offset": local,
                      "partition_max_bytes": 1 << 20}]}]}
        by_sendfile, by_views = call(plain, 1, 12, fetch), call(tls, 1, 12, fetch)
    records = codec.decode_response(1, 12, by_sendfile)[1]["responses"][0]["partitions"][0]
    assert memoryview(records["records"]).nbytes >= 32 * 1024  # past the sendfile threshold
    assert by_sendfile == by_views
