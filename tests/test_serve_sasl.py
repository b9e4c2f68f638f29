"""SASL and ACLs on `serve`: librdkafka over SASL_SSL with SCRAM-SHA-512 and kafka-python
over SASL_PLAINTEXT with PLAIN consume as an allowed principal, and so does Apache Kafka's
Java consumer over SASL_SSL, every record equal to `fetch --json`; a principal without ACLs
gets Kafka's authorization errors (the Java client's authorization exceptions) and no data;
a wrong password fails authentication and closes the connection; nothing but the handshake
is answered before authentication; the credentials file holds no password."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import struct
import time
from pathlib import Path

import pytest
from kafka_cluster import ClientError, run_client
from serve_support import (
    TOPIC,
    Record,
    ServeProcess,
    build_small_broker,
    engine,
    make_pki,
    records_of,
)

from engine.protocol import codec
from engine.protocol.sasl import credential, write_credentials

DEADLINE_S = 60
RECORDS = 1500
PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-2", "admin": "admin-secret-3",
             "carol,=x": "carol-secret-4"}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    """The broker file, the PKI dir, the credentials file and `engine fetch --json`'s view
    of the partition (read before `serve` holds the log dirs)."""
    base = tmp_path_factory.mktemp("sasl")
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    creds = base / "credentials.json"
    write_credentials(creds, {user: {m: credential(m, pw) for m in
                                     ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")}
                              for user, pw in PASSWORDS.items()})
    acls = base / "acls.json"
    acls.write_text(json.dumps([
        {"principal": "User:alice", "resource_type": "topic", "resource_name": TOPIC,
         "operation": "read", "permission_type": "allow"},
        {"principal": "User:alice", "resource_type": "group", "resource_name": "alice-",
         "pattern_type": "prefixed", "operation": "read", "permission_type": "allow"},
        {"principal": "User:bob", "resource_type": "group", "resource_name": "bob",
         "operation": "read", "permission_type": "allow"}]))
    config = build_small_broker(base, (
        "ssl.keystore.type=PEM\nssl.truststore.type=PEM\n"
        f"ssl.keystore.location={pki / 'keystore.pem'}\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
        f"engine.sasl.credentials.file={creds}\n"
        "authorizer.class.name=engine.protocol.acl.Authorizer\n"
        f"engine.acls.file={acls}\nsuper.users=User:admin\n"), records=RECORDS)
    Path(config).write_text(Path(config).read_text().replace(
        "listeners=PLAINTEXT://127.0.0.1:0",
        "listeners=SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"))
    view = records_of(engine("fetch", "--config", config, "--topic", TOPIC, "--partition",
                             "0", "--offset", "0", "--to-end", "--json").stdout)
    return config, pki, creds, view


@pytest.fixture(scope="module")
def secured(sasl_broker):
    config, pki, creds, _ = sasl_broker
    proc = ServeProcess(config, listeners=2)
    yield proc, pki, creds
    assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()
    for pw in PASSWORDS.values():
        assert pw not in proc.output()


def _librdkafka(proc, pki, user, mechanism="SCRAM-SHA-512", **extra):
    from confluent_kafka import Consumer

    errors = []
    consumer = Consumer({
        "bootstrap.servers": f"127.0.0.1:{proc.ports['SASL_SSL']}",
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki / "ca.pem"),
        "sasl.mechanism": mechanism, "sasl.username": user,
        "sasl.password": extra.pop("password", PASSWORDS[user]),
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted", "error_cb": errors.append, **extra})
    return consumer, errors


def test_allowed_principal_consumes_over_sasl_ssl_with_scram(secured):
    proc, pki, creds = secured
    consumer, errors = _librdkafka(proc, pki, "alice", **{"group.id": "alice-1"})
    got = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < RECORDS and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.offset())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert len(got) == RECORDS and not errors
    # the file holds salted keys only
    text = creds.read_text()
    assert not any(pw in text for pw in PASSWORDS.values())


def test_a_principal_without_acls_gets_authorization_errors(secured):
    from confluent_kafka import KafkaError

    proc, pki, _ = secured
    consumer, _ = _librdkafka(proc, pki, "bob", "SCRAM-SHA-256", **{"group.id": "bob"})
    try:
        assert TOPIC not in consumer.list_topics(timeout=30).topics  # not even described
        named = consumer.list_topics(topic=TOPIC, timeout=30).topics[TOPIC]
        assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    # what bob's requests get on the wire
    with _authenticated(proc, "bob") as s:
        fetch = _call(s, 1, 11, 10, {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        row = fetch["responses"][0]["partitions"][0]
        assert row["error_code"] == 29 and not bytes(row["records"] or b"")
        offsets = _call(s, 2, 7, 11, {"replica_id": -1, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
        assert offsets["topics"][0]["partitions"][0]["error_code"] == 29
        commit = _call(s, 8, 8, 12, {"group_id": "bob", "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 5}]}]})
        assert commit["topics"][0]["partitions"][0]["error_code"] == 29
        commit = _call(s, 8, 8, 13, {"group_id": "alice-1", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 5}]}]})
        assert commit["topics"][0]["partitions"][0]["error_code"] == 30
    # alice may not use bob's group
    consumer, _ = _librdkafka(proc, pki, "alice", **{"group.id": "bob"})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        error = None
        while error is None and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                error = m.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_kafka_python_plain_and_a_super_user(secured):
    from kafka import KafkaConsumer, TopicPartition

    proc, _, _ = secured
    for user in ("alice", "admin"):
        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{proc.ports['SASL_PLAINTEXT']}",
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username=user, sasl_plain_password=PASSWORDS[user],
            enable_auto_commit=False)
        try:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            records = []
            deadline = time.monotonic() + DEADLINE_S
            while not records and time.monotonic() < deadline:
                records = consumer.poll(timeout_ms=500).get(tp, [])
            assert records, user
        finally:
            consumer.close()


def _java_consume(proc, pki, user, mechanism, *args):
    """The Java consumer over SASL_SSL (the CA's PEM as its truststore)."""
    module = ("scram.ScramLoginModule" if mechanism.startswith("SCRAM")
              else "plain.PlainLoginModule")
    jaas = (f"org.apache.kafka.common.security.{module} required "
            f'username="{user}" password="{PASSWORDS[user]}";')
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
             "sasl.jaas.config": jaas, "ssl.truststore.type": "PEM",
             "ssl.truststore.location": str(pki / "ca.pem")}
    return run_client(["consume", "--bootstrap", f"127.0.0.1:{proc.ports['SASL_SSL']}",
                       "--topic", TOPIC, *args, "--idle-ms", "3000", "--timeout-ms", "60000",
                       *(a for k, v in props.items() for a in ("--property", f"{k}={v}"))],
                      timeout=120)


def test_java_consumer_over_sasl_ssl_allowed_and_denied(secured, sasl_broker):
    """Apache Kafka's Java consumer over SASL_SSL: alice (SCRAM-SHA-512) reads every record
    as `fetch --json` shows it in a group she may use; bob (PLAIN, no topic ACL) gets
    TopicAuthorizationException, and alice in bob's group GroupAuthorizationException."""
    proc, pki, _ = secured
    view = sasl_broker[3]
    lines = _java_consume(proc, pki, "alice", "SCRAM-SHA-512", "--subscribe",
                          "--group", "alice-java", "--commit")
    assert lines[-1]["type"] == "end" and not lines[-1]["timed_out"], lines[-1]
    got = [Record(r["offset"], r["timestamp"], _b64(r["key"]), _b64(r["value"]),
                  [(k, _b64(v)) for k, v in r["headers"]])
           for r in lines if r["type"] == "record"]
    assert len(got) == RECORDS and got == view
    denied = {
        "org.apache.kafka.common.errors.TopicAuthorizationException": (
            "bob", "PLAIN", "--partitions", "0"),
        "org.apache.kafka.common.errors.GroupAuthorizationException": (
            "alice", "SCRAM-SHA-256", "--subscribe", "--group", "bob")}
    for exception, (user, mechanism, *how) in denied.items():
        with pytest.raises(ClientError) as failed:
            _java_consume(proc, pki, user, mechanism, *how)
        assert f"error: {exception}: " in failed.value.stderr, failed.value.stderr
        assert not [r for r in failed.value.lines if r["type"] == "record"]


def _b64(text):
    return None if text is None else base64.b64decode(text)


def _call(sock, api_key, version, correlation, body):
    sock.sendall(codec.encode_request(api_key, version, correlation, "t", body))

    def exactly(n):
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return out

    frame = exactly(struct.unpack(">i", exactly(4))[0])
    return codec.decode_response(api_key, version, frame)[1]


@contextlib.contextmanager
def _authenticated(proc, user):
    with socket.create_connection(("127.0.0.1", proc.ports["SASL_PLAINTEXT"]),
                                  timeout=30) as s:
        assert _call(s, 17, 1, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\x00" + user.encode() + b"\x00" + PASSWORDS[user].encode()
        assert _call(s, 36, 2, 2, {"auth_bytes": token})["error_code"] == 0
        yield s


def _closed(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_wrong_password_and_requests_before_authentication(secured):
    proc, _, _ = secured
    port = proc.ports["SASL_PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        assert _call(s, 18, 3, 1, {})["error_code"] == 0  # ApiVersions is answered
        s.sendall(codec.encode_request(3, 12, 2, "t", {"topics": None}))  # Metadata: not
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        resp = _call(s, 17, 1, 1, {"mechanism": "GSSAPI"})
        assert resp["error_code"] == 33 and "PLAIN" in resp["mechanisms"]
        assert _call(s, 17, 1, 2, {"mechanism": "PLAIN"})["error_code"] == 0
        resp = _call(s, 36, 2, 3, {"auth_bytes": b"\x00alice\x00wrong"})
        assert resp["error_code"] == 58 and "invalid credentials" in resp["error_message"]
        assert _closed(s)
    with _authenticated(proc, "alice") as s:
        meta = _call(s, 3, 12, 3, {"topics": None})
        assert [t["name"] for t in meta["topics"]] == [TOPIC]


def test_scram_client_first_rules_on_the_wire_and_an_escaped_name_with_librdkafka(secured):
    """librdkafka escapes `carol,=x` as carol=2C=3Dx and authenticates; on the wire a
    delegation-token exchange is refused, and an unknown user is answered a salt and fails
    at the proof, as a wrong password does."""
    proc, pki, _ = secured
    consumer, errors = _librdkafka(proc, pki, "carol,=x", "SCRAM-SHA-256",
                                   **{"group.id": "carol"})
    try:
        consumer.list_topics(timeout=30)  # authenticated (no ACL: no topic described)
    finally:
        consumer.close()
    assert not errors, errors
    port = proc.ports["SASL_PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        assert _call(s, 17, 1, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        resp = _call(s, 36, 2, 2, {"auth_bytes": b"n,,n=alice,r=abc,tokenauth=true"})
        assert resp["error_code"] == 58 and "Token" in resp["error_message"]
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        assert _call(s, 17, 1, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        resp = _call(s, 36, 2, 2, {"auth_bytes": b"n,,n=mallory,r=abc"})
        assert resp["error_code"] == 0 and b",s=" in bytes(resp["auth_bytes"])
        nonce = bytes(resp["auth_bytes"]).split(b",")[0][2:]
        final = b"c=biws,r=" + nonce + b",p=" + base64.b64encode(b"\0" * 32)
        resp = _call(s, 36, 2, 3, {"auth_bytes": final})
        assert resp["error_code"] == 58 and "invalid credentials" in resp["error_message"]
        assert _closed(s)
