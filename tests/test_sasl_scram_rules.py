"""SASL on `serve` against Kafka's rules, message by message: SCRAM's client-first message
(gs2 header `n` only, an authzid equal to the username, saslname escaping, extensions ignored
but `tokenauth=true` refused), an unknown user treated as a known one with a wrong password
(the same work, the same answers), and the authentication steps run on the I/O threads."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import threading
import types

import pytest

from engine.config import BrokerConfig
from engine.protocol import sasl
from engine.protocol.sasl import Credentials, SaslAuthenticationError, credential
from engine.protocol.server import KafkaServer

USERS = {"alice": "alice-secret", "carol,=x": "carol-secret"}


@pytest.fixture
def credentials(tmp_path):
    path = tmp_path / "credentials.json"
    sasl.write_credentials(path, {user: {m: credential(m, pw) for m in sasl.MECHANISMS}
                                  for user, pw in USERS.items()})
    return Credentials(path)


def _client_final(mechanism, password, client_first, server_first: bytes, gs2="n,,"):
    """The client-final message of a SCRAM exchange (RFC 5802), computed from the
    password."""
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(name, password.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored_key = hashlib.new(name, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={attrs['r']}"
    auth = f"{client_first[len(gs2):]},{server_first.decode()},{without_proof}"
    signature = hmac.new(stored_key, auth.encode(), name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def _exchange(credentials, client_first: str, password: str,
              mechanism="SCRAM-SHA-256", gs2="n,,"):
    server = sasl.new_server(mechanism, credentials)
    server_first = server.step(client_first.encode())
    server.step(_client_final(mechanism, password, client_first, server_first, gs2))
    return server.principal


def _refused(credentials, client_first: str, mechanism="SCRAM-SHA-256") -> str:
    with pytest.raises(SaslAuthenticationError) as info:
        sasl.new_server(mechanism, credentials).step(client_first.encode())
    return str(info.value)


def test_scram_client_first_messages_as_kafka_reads_them(credentials):
    # the gs2 header: no authzid, or the username's
    assert _exchange(credentials, "n,,n=alice,r=abc", "alice-secret") == "alice"
    assert _exchange(credentials, "n,a=alice,n=alice,r=abc", "alice-secret",
                     gs2="n,a=alice,") == "alice"
    assert "authorization id" in _refused(credentials, "n,a=bob,n=alice,r=abc")
    # channel binding is not offered: `y` and `p=` headers are refused, as is a bare message
    for first in ("y,,n=alice,r=abc", "p=tls-unique,,n=alice,r=abc", "n=alice,r=abc"):
        assert "format" in _refused(credentials, first), first
    # saslname escaping: `,` and `=` as =2C and =3D, no other `=`
    assert _exchange(credentials, "n,,n=carol=2C=3Dx,r=abc", "carol-secret",
                     "SCRAM-SHA-512") == "carol,=x"
    assert "format" in _refused(credentials, "n,,n=carol=x,r=abc")
    # extensions: ignored, except delegation-token authentication, which serve has not
    assert _exchange(credentials, "n,,n=alice,r=abc,foo=bar", "alice-secret") == "alice"
    assert "Token" in _refused(credentials, "n,,n=alice,r=abc,tokenauth=true")
    assert _exchange(credentials, "n,,n=alice,r=abc,tokenauth=false", "alice-secret") \
        == "alice"


def test_an_unknown_scram_user_gets_the_answers_of_a_wrong_password(credentials):
    def failure(user, nonce="abc"):
        server = sasl.new_server("SCRAM-SHA-256", credentials)
        first = f"n,,n={user},r={nonce}"
        server_first = server.step(first.encode())  # not refused at the first message
        attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
        with pytest.raises(SaslAuthenticationError) as info:
            server.step(_client_final("SCRAM-SHA-256", "guess", first, server_first))
        assert server.principal is None
        return attrs, str(info.value)

    known, known_error = failure("alice")
    unknown, unknown_error = failure("mallory")
    assert unknown_error == known_error
    assert unknown["i"] == known["i"] == "8192"
    assert len(base64.b64decode(unknown["s"])) == len(base64.b64decode(known["s"]))
    assert failure("mallory", "xyz")[0]["s"] == unknown["s"]  # the same salt each time
    assert failure("eve")[0]["s"] != unknown["s"]


def test_plain_hashes_an_unknown_users_password_as_a_known_ones(credentials, monkeypatch):
    calls = []
    real = hashlib.pbkdf2_hmac

    def spy(name, password, salt, iterations, *rest):
        calls.append((name, len(salt), iterations))
        return real(name, password, salt, iterations, *rest)

    monkeypatch.setattr(sasl.hashlib, "pbkdf2_hmac", spy)
    errors = []
    for user in ("alice", "mallory"):
        with pytest.raises(SaslAuthenticationError) as info:
            sasl.new_server("PLAIN", credentials).step(f"\0{user}\0wrong".encode())
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert calls[0] == calls[1] == ("sha512", 32, 8192)


def test_authentication_steps_run_on_the_io_threads(credentials, monkeypatch):
    threads = []
    real = hashlib.pbkdf2_hmac

    def spy(*args):
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(sasl.hashlib, "pbkdf2_hmac", spy)
    broker = types.SimpleNamespace(describes_configs=False)
    server = KafkaServer(broker, BrokerConfig({"sasl.enabled.mechanisms": "PLAIN"}),
                         credentials=credentials)
    session = {"sasl_listener": True, "authenticated": False, "sasl": None, "close": False}

    async def authenticate():
        try:
            await server._sasl(17, 1, {"mechanism": "PLAIN"}, session)
            return await server._sasl(36, 2, {"auth_bytes": b"\0alice\0alice-secret"},
                                      session)
        finally:
            await server.close()

    answer = asyncio.run(authenticate())
    assert answer["error_code"] == 0 and session["principal"] == "User:alice"
    assert threads and all(name.startswith("serve-io") for name in threads), threads
