"""Kafka's request and response messages, framed.

`engine.protocol.messages` describes each message as a table of fields; this module parses
those tables once with the generic codec of `engine.message_codec` (which holds the field
encoding rules) and adds the frames:

- request header v0 (api key, version, correlation id), v1 (+ client id, a nullable
  non-compact string), v2 (+ tagged fields); response header v0 (correlation id), v1
  (+ tagged fields). Flexible versions use the higher header, except ApiVersions responses,
  always v0 so an old client can read the error of a version it did not know.

Malformed input is an `InvalidRequestError` naming the message, field and position;
encoding returns a list of buffers with record bytes passed through as the views they came
in, never copied.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from dataclasses import dataclass

from engine.errors import InvalidRequestError, UnsupportedVersionError
from engine.message_codec import (
    Reader,
    Struct,
    Writer,
    parse_schema,
    part_nbytes,
    read_struct,
    read_tagged,
    write_struct,
)
from engine.protocol import messages

__all__ = [
    "InvalidRequestError",
    "Request",
    "Struct",
    "UnsupportedVersionError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "is_flexible",
    "request_schema",
    "response_schema",
]

_I32 = struct.Struct(">i")

_REQUESTS: dict[int, Struct] = {}
_RESPONSES: dict[int, Struct] = {}
for _key, (_req, _resp) in messages.SCHEMAS.items():
    _name = messages.API_VERSIONS[_key][0]
    _REQUESTS[_key] = parse_schema(f"{_name}Request", _req)
    _RESPONSES[_key] = parse_schema(f"{_name}Response", _resp)
_REQUEST_HEADER = parse_schema("RequestHeader", messages.REQUEST_HEADER)
_RESPONSE_HEADER = parse_schema("ResponseHeader", messages.RESPONSE_HEADER)
_API_VERSIONS_KEY = 18


def request_schema(api_key: int) -> Struct:
    return _REQUESTS[api_key]


def response_schema(api_key: int) -> Struct:
    return _RESPONSES[api_key]


def is_flexible(api_key: int, version: int) -> bool:
    return version >= messages.API_VERSIONS[api_key][3]


# ------------------------------------------------------------------------------- decoding

@dataclass
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict
    size: int = 0


def _header(frame) -> tuple[int, int, int]:
    if len(frame) < 8:
        raise InvalidRequestError(f"request of {len(frame)} bytes is shorter than a header",
                                  position=0)
    api_key, version = struct.unpack_from(">hh", frame, 0)
    return api_key, version, _I32.unpack_from(frame, 4)[0]


def decode_request(frame) -> Request:
    """A request frame (without its 4-byte size) -> Request.

    Raises:
        UnsupportedVersionError: an API key or version not in messages.API_VERSIONS (the
            header fields are on the error).
        InvalidRequestError: anything malformed.
    """
    api_key, version, correlation_id = _header(frame)
    info = messages.API_VERSIONS.get(api_key)
    if info is None or not info[1] <= version <= info[2]:
        what = f"API key {api_key}" if info is None else f"{info[0]} v{version}"
        raise UnsupportedVersionError(f"unsupported request: {what}", api_key=api_key,
                                      api_version=version, correlation_id=correlation_id)
    flexible = version >= info[3]
    r = Reader(frame, 0, len(frame), f"{info[0]}Request v{version}")
    header = read_struct(r, _REQUEST_HEADER, 1, False)
    if flexible:
        read_tagged(r, {}, {}, 2)
    body = read_struct(r, _REQUESTS[api_key], version, flexible)
    # bytes after the message are ignored, as Kafka's parser ignores them (librdkafka
    # leaves unused bytes of a reserved array count behind a null Metadata topic list)
    return Request(api_key, version, correlation_id, header["client_id"], body, len(frame))


def decode_response(api_key: int, version: int, frame) -> tuple[int, dict]:
    """A response frame (without its size) -> (correlation id, body). For clients and
    tests; raises InvalidRequestError on malformed input."""
    flexible = is_flexible(api_key, version)
    r = Reader(frame, 0, len(frame), f"{messages.API_VERSIONS[api_key][0]}Response "
                f"v{version}")
    correlation_id = read_struct(r, _RESPONSE_HEADER, 0, False)["correlation_id"]
    if flexible and api_key != _API_VERSIONS_KEY:
        read_tagged(r, {}, {}, 1)
    body = read_struct(r, _RESPONSES[api_key], version, flexible)
    if r.pos != r.end:
        r.fail("(end)", f"{r.end - r.pos} bytes left over")
    return correlation_id, body


# ------------------------------------------------------------------------------- encoding

def _framed(parts: list) -> list:
    size = sum(map(part_nbytes, parts))
    return [_I32.pack(size), *parts]


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> list:
    """The whole response frame (4-byte size first) as a list of buffers; `records`
    values (buffers or FileRegions) are included as given (no copy). Absent fields take
    their default."""
    flexible = is_flexible(api_key, version)
    w = Writer()
    w.cur += _I32.pack(correlation_id)
    if flexible and api_key != _API_VERSIONS_KEY:
        w.uvarint(0)
    write_struct(w, _RESPONSES[api_key], body, version, flexible)
    return _framed(w.finish())


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: dict) -> bytes:
    """A whole request frame (4-byte size first); for tests and tools."""
    flexible = is_flexible(api_key, version)
    w = Writer()
    write_struct(w, _REQUEST_HEADER, {"request_api_key": api_key,
                                       "request_api_version": version,
                                       "correlation_id": correlation_id,
                                       "client_id": client_id}, 1, False)
    if flexible:
        w.uvarint(0)
    write_struct(w, _REQUESTS[api_key], body, version, flexible)
    return b"".join(bytes(p) for p in _framed(w.finish()))


def uuid_str(raw: bytes) -> str:
    return str(_uuid.UUID(bytes=bytes(raw)))
