"""SASL for `serve`'s SASL_PLAINTEXT / SASL_SSL listeners: PLAIN (RFC 4616) and
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's SaslServer implementations
answer them, over SaslHandshake v1 + SaslAuthenticate.

Credentials live in a JSON file (`engine.sasl.credentials.file`), salted, never a password:

    {"users": {"alice": {
        "SCRAM-SHA-256": {"salt": b64, "iterations": 8192, "stored_key": b64, "server_key": b64},
        "SCRAM-SHA-512": {...},
        "PLAIN": {"salt": b64, "iterations": 8192, "hash": b64}}}}

(PLAIN's entry is PBKDF2-HMAC-SHA-512 of the password.) `credential()` computes an entry from
a password; `write_credentials()` writes a file (temp file, fsync, rename, mode 0600).
A failed authentication answers SASL_AUTHENTICATION_FAILED without saying whether the user
exists, and the connection is closed; no secret is ever logged. An unknown user costs what a
known one does: PLAIN hashes the password with PBKDF2 over a made-up salt and the default
iteration count, SCRAM answers a made-up salt (the same for the same name) and fails at the
proof, as a wrong password does.

SCRAM's client-first message follows Kafka's rules (ScramMessages): gs2 header `n,,` or
`n,a=AUTHZID,` (no channel binding; the authzid must be the username), `n=` a saslname
(`,` and `=` escaped as `=2C` and `=3D`, no other `=`), `r=` the nonce, then extensions
`,key=value`: `tokenauth=true` (delegation-token authentication) is refused, as serve has
no tokens; other extensions are ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets

from engine.common import write_file_atomically
from engine.config import ConfigError
from engine.errors import SaslAuthenticationError

__all__ = ["MECHANISMS", "Credentials", "SaslAuthenticationError", "credential", "new_server",
           "write_credentials"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum
_DEFAULT_ITERATIONS = 8192
#: keys the made-up credentials of unknown users derive from (one per process)
_MOCK_SECRET = secrets.token_bytes(32)
#: ScramMessages' grammar: a saslname is 7-bit characters but `,` and `=`, or =2C / =3D
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<extensions>(?:,[A-Za-z]+=[\x01-\x2b\x2d-\x7f]+)*))")
_PLAIN_HASH = "sha512"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def credential(mechanism: str, password: str, iterations: int = _DEFAULT_ITERATIONS,
               salt: bytes | None = None) -> dict:
    """The stored entry of `password` for `mechanism` (a random salt unless given)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SASL mechanism {mechanism!r}: one of {MECHANISMS}")
    if iterations < _MIN_ITERATIONS:
        raise ValueError(f"iterations must be >= {_MIN_ITERATIONS}, got {iterations}")
    salt = secrets.token_bytes(32) if salt is None else salt
    if mechanism == "PLAIN":
        digest = hashlib.pbkdf2_hmac(_PLAIN_HASH, password.encode(), salt, iterations)
        return {"salt": _b64(salt), "iterations": iterations, "hash": _b64(digest)}
    name = _HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return {"salt": _b64(salt), "iterations": iterations,
            "stored_key": _b64(hashlib.new(name, client_key).digest()),
            "server_key": _b64(hmac.new(salted, b"Server Key", name).digest())}


def write_credentials(path, users: dict[str, dict[str, dict]]) -> None:
    """Writes {user: {mechanism: credential(...)}} as a credentials file."""
    data = json.dumps({"users": users}, indent=1, sort_keys=True).encode()
    write_file_atomically(path, data)
    os.chmod(path, 0o600)


class Credentials:
    """The users of a credentials file (read once at start)."""

    def __init__(self, path) -> None:
        self.path = str(path)
        key = "engine.sasl.credentials.file"
        try:
            with open(path, "rb") as f:
                users = json.load(f)["users"]
        except FileNotFoundError as exc:
            raise ConfigError(key, self.path, f"[Errno {exc.errno}] {exc.strerror}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(key, self.path, f"not a credentials file: {exc}") from None
        self.users: dict[str, dict] = users

    def get(self, user: str, mechanism: str) -> dict | None:
        entry = self.users.get(user)
        return None if entry is None else entry.get(mechanism)


def _mock_salt(user: str, mechanism: str) -> bytes:
    """The salt answered for an unknown user: the same each time the name is tried."""
    return hmac.new(_MOCK_SECRET, f"{mechanism}\0{user}".encode(), "sha256").digest()


def _mock_scram(user: str, mechanism: str) -> dict:
    """A SCRAM credential no password matches, for an unknown user: its keys are made up
    (no PBKDF2: a known user's exchange runs none either)."""
    name = _HASHES[mechanism]
    key = hmac.new(_MOCK_SECRET, f"{mechanism}\0{user}\0keys".encode(), name).digest()
    return {"salt": _b64(_mock_salt(user, mechanism)), "iterations": _DEFAULT_ITERATIONS,
            "stored_key": _b64(hashlib.new(name, key).digest()),
            "server_key": _b64(hmac.new(key, b"Server Key", name).digest())}


def _fail(mechanism: str):
    raise SaslAuthenticationError(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}")


class PlainServer:
    """PLAIN: one message `authzid NUL authcid NUL password`."""

    mechanism = "PLAIN"

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.principal: str | None = None

    def step(self, data: bytes) -> bytes | None:
        parts = data.split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        entry = self.credentials.get(user, "PLAIN")
        if entry is None:  # the same hashing as a known user's, then the same failure
            salt, iterations, expected = _mock_salt(user, "PLAIN"), _DEFAULT_ITERATIONS, b""
        else:
            salt, iterations = base64.b64decode(entry["salt"]), entry["iterations"]
            expected = base64.b64decode(entry["hash"])
        digest = hashlib.pbkdf2_hmac(_PLAIN_HASH, password.encode(), salt, iterations)
        if not hmac.compare_digest(digest, expected) or entry is None:
            _fail(self.mechanism)
        self.principal = user
        return b""


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in message.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise SaslAuthenticationError(f"Invalid SCRAM message attribute {item[:20]!r}")
        out.setdefault(key, value)
    return out


def _username(saslname: str) -> str:
    """A saslname unescaped (=2C is `,`, =3D is `=`; the grammar allows no other `=`)."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """SCRAM-SHA-256/512 server: client-first -> server-first, client-final ->
    server-final."""

    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self.hash = _HASHES[mechanism]
        self.credentials = credentials
        self.principal: str | None = None
        self._state = "first"

    def step(self, data: bytes) -> bytes | None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise SaslAuthenticationError("Unexpected SCRAM message after completion")

    def _first(self, text: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise SaslAuthenticationError("Invalid SCRAM client first message format")
        user = _username(match["saslname"])
        authz = match["authzid"]
        if authz is not None and _username(authz) != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        extensions = {key: value for key, _, value in
                      (item.partition("=") for item in match["extensions"].split(",")[1:])}
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslAuthenticationError("Token authentication failed: serve has no "
                                          "delegation tokens")
        entry = self.credentials.get(user, self.mechanism)
        self._entry = _mock_scram(user, self.mechanism) if entry is None else entry
        self._user = user if entry is not None else None
        self._gs2 = text[:match.start("bare")]
        self._nonce = match["nonce"] + secrets.token_urlsafe(24)
        self._client_first_bare = match["bare"]
        self._server_first = (f"r={self._nonce},s={self._entry['salt']},"
                              f"i={self._entry['iterations']}")
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        without_proof, sep, proof = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("Invalid SCRAM client final message")
        attrs = _attributes(without_proof)
        if attrs.get("r") != self._nonce:
            raise SaslAuthenticationError("Invalid SCRAM client final message: nonce")
        if attrs.get("c") != _b64(self._gs2.encode()):
            raise SaslAuthenticationError("Invalid SCRAM client final message: "
                                          "channel binding")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        stored_key = base64.b64decode(self._entry["stored_key"])
        signature = hmac.new(stored_key, auth_message.encode(), self.hash).digest()
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except ValueError:
            _fail(self.mechanism)
        if len(client_proof) != len(signature):
            _fail(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), stored_key) \
                or self._user is None:
            _fail(self.mechanism)
        server_key = base64.b64decode(self._entry["server_key"])
        verifier = hmac.new(server_key, auth_message.encode(), self.hash).digest()
        self.principal = self._user
        self._state = "done"
        return f"v={_b64(verifier)}".encode()


def new_server(mechanism: str, credentials: Credentials):
    if mechanism == "PLAIN":
        return PlainServer(credentials)
    return ScramServer(mechanism, credentials)
