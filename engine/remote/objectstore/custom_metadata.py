"""The custom metadata (KIP-917) the object-store tier returns from a copy, as the Aiven
plugin writes it: a Kafka protocol tagged-fields section and nothing else.

    uvarint  number of fields
    then per field, in ascending tag order:
        uvarint tag, uvarint size, `size` bytes of value

    tag 0  remote_size    VARLONG (zig-zag): bytes uploaded for .log + .indexes + manifest
    tag 1  object_prefix  COMPACT_STRING (uvarint length + 1, then UTF-8): the key prefix
    tag 2  object_key     COMPACT_STRING: the main path (see `keys`)

Which fields are written is `custom.metadata.fields.include` (names REMOTE_SIZE,
OBJECT_PREFIX, OBJECT_KEY); none gives no custom metadata at all. Unknown tags are skipped on
read, as Kafka's tagged fields are.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping

__all__ = [
    "FIELD_NAMES",
    "OBJECT_KEY",
    "OBJECT_PREFIX",
    "REMOTE_SIZE",
    "decode_custom_metadata",
    "decoded_fields",
    "encode_custom_metadata",
]

REMOTE_SIZE, OBJECT_PREFIX, OBJECT_KEY = 0, 1, 2
#: The config names of the fields (the plugin's SegmentCustomMetadataField), by tag.
FIELD_NAMES = {"REMOTE_SIZE": REMOTE_SIZE, "OBJECT_PREFIX": OBJECT_PREFIX,
               "OBJECT_KEY": OBJECT_KEY}
_MAX_UVARINT_BYTES = 5  # Kafka's unsigned varints are 32-bit
_MAX_VARLONG_BYTES = 10


def _uvarint(value: int) -> bytes:
    out = bytearray()
    for _ in range(_MAX_VARLONG_BYTES):
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)
    raise ValueError("a custom metadata value over 64 bits cannot be encoded")


def _read_varint(data: bytes, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    value = shift = 0
    for i in range(max_bytes):
        if pos + i >= len(data):
            raise ValueError(f"{what} truncated at byte {pos + i} of {len(data)}")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos + i + 1
    raise ValueError(f"{what} at byte {pos} is longer than {max_bytes} bytes")


def _compact_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _uvarint(len(raw) + 1) + raw


def encode_custom_metadata(fields: Mapping[int, int | str]) -> bytes:
    """The tagged-fields bytes of `fields` (tag -> value); b"" for none."""
    if not fields:
        return b""
    out = bytearray(_uvarint(len(fields)))
    for tag in sorted(fields):
        value = fields[tag]
        if tag == REMOTE_SIZE:
            if not -(2**63) <= int(value) < 2**63:
                raise ValueError(f"remote_size {value} does not fit a varlong")
            body = _uvarint(((int(value) << 1) ^ (int(value) >> 63)) & (2**64 - 1))
        elif tag in (OBJECT_PREFIX, OBJECT_KEY):
            body = _compact_string(str(value))
        else:
            raise ValueError(f"unknown custom metadata tag {tag}")
        out += _uvarint(tag) + _uvarint(len(body)) + body
    return bytes(out)


@functools.lru_cache(maxsize=4096)  # every read of a segment names its objects from them
def decoded_fields(data: bytes) -> Mapping[int, int | str]:
    """`decode_custom_metadata`, memoized, read-only."""
    return types.MappingProxyType(decode_custom_metadata(data))


def decode_custom_metadata(data: bytes) -> dict[int, int | str]:
    """tag -> value of the known fields. ValueError for bytes that are not a tagged-fields
    section (truncated, tags out of order, a field whose value does not fill its size)."""
    data = bytes(data)
    if not data:
        return {}
    count, pos = _read_varint(data, 0, _MAX_UVARINT_BYTES, "field count")
    if count > len(data):
        raise ValueError(f"field count {count} exceeds the {len(data)} bytes given")
    fields: dict[int, int | str] = {}
    last_tag = -1
    for _ in range(count):
        tag, pos = _read_varint(data, pos, _MAX_UVARINT_BYTES, "tag")
        if tag <= last_tag:
            raise ValueError(f"tag {tag} after tag {last_tag}: tags must ascend")
        last_tag = tag
        size, pos = _read_varint(data, pos, _MAX_UVARINT_BYTES, f"size of tag {tag}")
        end = pos + size
        if end > len(data):
            raise ValueError(f"tag {tag} claims {size} bytes, {len(data) - pos} remain")
        body = data[pos:end]
        if tag == REMOTE_SIZE:
            raw, used = _read_varint(body, 0, _MAX_VARLONG_BYTES, "remote_size")
            if raw >> 64:
                raise ValueError("remote_size overflows a varlong")
            value: int | str = (raw >> 1) ^ -(raw & 1)
        elif tag in (OBJECT_PREFIX, OBJECT_KEY):
            length, used = _read_varint(body, 0, _MAX_UVARINT_BYTES, f"string of tag {tag}")
            if length == 0:
                raise ValueError(f"tag {tag}: a null string where a string is required")
            used_end = used + length - 1
            if used_end > len(body):
                raise ValueError(f"tag {tag}: string of {length - 1} bytes overruns its field")
            try:
                value = body[used:used_end].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"tag {tag}: not UTF-8 ({exc.reason})") from None
            used = used_end
        else:
            pos = end
            continue  # a field of a newer writer: skipped, as Kafka skips unknown tags
        if used != size:
            raise ValueError(f"tag {tag}: value uses {used} of its {size} bytes")
        fields[tag] = value
        pos = end
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes after {count} fields")
    return fields
