"""Kafka's generic message encoding, for any schema written in one small grammar.

Kafka generates a class per message from its JSON schemas (`clients/.../common/message`,
`storage/.../resources/message`, ...); here a schema is a few lines of text, parsed once into
`Struct`s, and one encoder/decoder interprets them for any version. The protocol server's
requests and responses (engine.protocol) and the records of Kafka's `__remote_log_metadata`
topic (engine.remote) are both written this way.

Grammar: one field per line, children indented by two spaces:

    Name type versions [null=versions] [tag=N] [default=value]

- `type`: int8 int16 int32 int64 uint16 float64 bool uuid string bytes records, `[]int32`
  style arrays of a primitive, `[]` an array of the indented struct, `{}` one struct.
- `versions`: `3+`, `0-7` or `1`: the versions holding the field; `null=` the versions in
  which it may be null; `tag=` makes it a tagged field of the flexible versions (KIP-482).
- `default`: the value of an absent field, and the value a tagged field is omitted at.

Wire rules (Kafka's `protocol` guide and KIP-482):

- big-endian int8/16/32/64, uint16, float64, bool (one byte), uuid (16 bytes);
- non-flexible versions: string = int16 length + UTF-8 (-1 null), bytes/records = int32
  length + data (-1 null), array = int32 count (-1 null);
- flexible versions: string, bytes, records and arrays carry an unsigned varint of length
  (or count) + 1, 0 meaning null, and every struct (the message included) ends with a tagged
  field section: uvarint count, then per field uvarint tag, uvarint size, data.

Decoding is bounded: every length and count is checked against the bytes left before
anything is allocated (each array element takes at least one byte); varints longer than
five bytes, truncation and a tagged field whose value does not fill its size raise the
reader's error class (InvalidRequestError unless the caller names another) naming the
message, field and position; unknown tags are skipped as Kafka skips them. Encoding returns
a list of buffers: `records` values are passed through as the views they came in, never
copied; a null given for a version where the field cannot be null is written empty (as
Kafka downgrades, e.g. JoinGroup's protocol name before v7).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NoReturn

from engine.errors import InvalidRequestError, KafkaEngineError

__all__ = [
    "Field",
    "Reader",
    "Struct",
    "Writer",
    "decode_message",
    "encode_message",
    "parse_schema",
    "part_nbytes",
    "read_struct",
    "read_tagged",
    "write_struct",
]

_MAX_VERSION = 0x7FFF
_PRIMITIVES = {
    "int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"), "uint16": struct.Struct(">H"), "float64": struct.Struct(">d"),
    "bool": struct.Struct(">?"),
}
_VARIABLE = ("string", "bytes", "records", "uuid")
_I16 = _PRIMITIVES["int16"]
_I32 = _PRIMITIVES["int32"]
_ZERO_UUID = b"\x00" * 16


def _versions(text: str) -> tuple[int, int]:
    if text.endswith("+"):
        return int(text[:-1]), _MAX_VERSION
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


@dataclass(eq=False)
class Field:
    name: str
    key: str
    type: str           # a primitive, "array" or "struct"
    elem: str | None    # array element type: a primitive, or "struct"
    lo: int
    hi: int
    null_lo: int
    null_hi: int
    tag: int | None
    default: object
    struct: Struct | None

    def present(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def nullable(self, version: int) -> bool:
        return self.null_lo <= version <= self.null_hi

    def default_value(self, version: int):
        """An absent field's value: a field that is nullable in some version and not in
        this one is null (Kafka's `"default": "null"`, e.g. GroupInstanceId before its
        version); present but not nullable here, it is empty."""
        if self.type == "struct":
            return self.struct.defaults(version)
        if self.default is None and self.present(version) and not self.nullable(version):
            return {"array": [], "string": "", "bytes": b""}.get(self.type)
        return self.default


def _default(type_: str, raw: str | None, nullable_somewhere: bool):
    if raw is None:
        if type_ in ("string", "bytes", "records") and nullable_somewhere:
            return None  # null where nullable; "" / b"" in the other versions
        return {"string": "", "bytes": b"", "records": None, "uuid": _ZERO_UUID,
                "bool": False, "float64": 0.0}.get(type_, 0)
    if type_ == "bool":
        return raw == "true"
    if type_ == "float64":
        return float(raw)
    return int(raw, 0) if type_ in _PRIMITIVES else raw


class Struct:
    """The fields of one message or nested struct, with a plan per version (which fields
    are in the body in order, which are tagged) computed once."""

    def __init__(self, name: str, fields: list[Field]) -> None:
        self.name = name
        self.fields = fields
        self._plans: dict[int, tuple[list[Field], dict[int, Field]]] = {}

    def plan(self, version: int, flexible: bool):
        key = version * 2 + flexible
        plan = self._plans.get(key)
        if plan is None:
            body = [f for f in self.fields
                    if f.present(version) and not (flexible and f.tag is not None)]
            tagged = {f.tag: f for f in self.fields
                      if f.present(version) and flexible and f.tag is not None}
            plan = self._plans[key] = (body, tagged)
        return plan

    def defaults(self, version: int) -> dict:
        return {f.key: f.default_value(version) for f in self.fields}


def parse_schema(name: str, text: str) -> Struct:
    """The grammar of engine.protocol.messages -> a Struct."""
    lines = [line for line in text.splitlines() if line.strip()]
    pos = 0

    def block(prefix: str, depth: int) -> Struct:
        nonlocal pos
        fields: list[Field] = []
        while pos < len(lines):
            line = lines[pos]
            indent = (len(line) - len(line.lstrip(" "))) // 2
            if indent < depth:
                break
            if indent > depth:
                raise ValueError(f"{name}: bad indentation at {line!r}")
            pos += 1
            fname, type_, versions, *opts = line.split()
            options = dict(o.split("=", 1) for o in opts)
            lo, hi = _versions(versions)
            null_lo, null_hi = _versions(options["null"]) if "null" in options else (1, 0)
            elem = None
            sub = None
            if type_ in ("[]", "{}"):
                sub = block(f"{prefix}.{fname}", depth + 1)
                elem, type_ = ("struct", "array") if type_ == "[]" else (None, "struct")
            elif type_.startswith("[]"):
                elem, type_ = type_[2:], "array"
            if (elem or type_) not in _PRIMITIVES and (elem or type_) not in _VARIABLE \
                    and (elem or type_) != "struct" and type_ != "struct":
                raise ValueError(f"{name}: unknown type {type_} of {fname}")
            default = (None if type_ in ("array", "struct")
                       else _default(type_, options.get("default"), null_lo <= null_hi))
            fields.append(Field(fname, _snake(fname), type_, elem, lo, hi, null_lo, null_hi,
                                int(options["tag"]) if "tag" in options else None, default,
                                sub))
        return Struct(prefix, fields)

    out = block(name, 0)
    if pos != len(lines):
        raise ValueError(f"{name}: bad indentation at {lines[pos]!r}")
    return out



# ---- decoding

class Reader:
    """Reads `buf[pos:end]`; every problem is an `error` (a KafkaEngineError class taking
    `position=`) naming `what` (the message being read), the field and the position."""

    __slots__ = ("buf", "end", "error", "pos", "what")

    def __init__(self, buf, pos: int, end: int, what: str,
                 error: type[KafkaEngineError] = InvalidRequestError) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.what = what
        self.error = error

    def fail(self, field: str, problem: str) -> NoReturn:
        raise self.error(f"{self.what}: field {field}: {problem}", position=self.pos)

    def take(self, n: int, field: str) -> int:
        pos = self.pos
        if n < 0 or n > self.end - pos:
            self.fail(field, f"needs {n} bytes, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def uvarint(self, field: str) -> int:
        value = shift = 0
        for _ in range(5):
            if self.pos >= self.end:
                self.fail(field, "truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        self.fail(field, "varint longer than 5 bytes")

    def length(self, field: str, flexible: bool, wide: bool) -> int:
        """A length or count: -1 for null."""
        if flexible:
            return self.uvarint(field) - 1
        s = _I32 if wide else _I16
        return s.unpack_from(self.buf, self.take(s.size, field))[0]


def _read_value(r: Reader, type_: str, f: Field, version: int, flexible: bool):
    s = _PRIMITIVES.get(type_)
    if s is not None:
        return s.unpack_from(r.buf, r.take(s.size, f.name))[0]
    if type_ == "uuid":
        pos = r.take(16, f.name)
        return bytes(r.buf[pos:pos + 16])
    n = r.length(f.name, flexible, type_ != "string")
    if n < 0:
        if n != -1 or not f.nullable(version):
            r.fail(f.name, f"length {n} (null not allowed)" if n == -1 else f"length {n}")
        return None
    pos = r.take(n, f.name)
    if type_ == "string":
        try:
            return bytes(r.buf[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            r.pos = pos
            r.fail(f.name, "not UTF-8")
    view = memoryview(r.buf)[pos:pos + n]
    return view if type_ == "records" else bytes(view)


def _read_field(r: Reader, f: Field, version: int, flexible: bool):
    if f.type == "struct":
        return read_struct(r, f.struct, version, flexible)
    if f.type != "array":
        return _read_value(r, f.type, f, version, flexible)
    count = r.length(f.name, flexible, True)
    if count < 0:
        if count != -1 or not f.nullable(version):
            r.fail(f.name, f"array count {count}")
        return None
    if count > r.end - r.pos:  # every element takes at least one byte
        r.fail(f.name, f"array count {count} with {r.end - r.pos} bytes left")
    if f.elem == "struct":
        return [read_struct(r, f.struct, version, flexible) for _ in range(count)]
    s = _PRIMITIVES.get(f.elem)
    if s is not None:
        pos = r.take(s.size * count, f.name)
        return [s.unpack_from(r.buf, pos + i * s.size)[0] for i in range(count)]
    return [_read_value(r, f.elem, f, version, flexible) for _ in range(count)]


def read_tagged(r: Reader, tagged: dict[int, Field], out: dict, version: int) -> None:
    count = r.uvarint("tagged fields")
    if count > r.end - r.pos:
        r.fail("tagged fields", f"count {count} with {r.end - r.pos} bytes left")
    for _ in range(count):
        tag = r.uvarint("tag")
        size = r.uvarint(f"size of tag {tag}")
        start = r.take(size, f"tag {tag}")
        f = tagged.get(tag)
        if f is None:
            continue  # unknown tags are skipped, as Kafka does
        sub = Reader(r.buf, start, start + size, r.what, r.error)
        out[f.key] = _read_field(sub, f, version, True)
        if sub.pos != sub.end:
            sub.fail(f.name, f"tagged field of {size} bytes has {sub.end - sub.pos} left over")


def read_struct(r: Reader, s: Struct, version: int, flexible: bool) -> dict:
    body, tagged = s.plan(version, flexible)
    out = {}
    for f in body:
        out[f.key] = _read_field(r, f, version, flexible)
    if flexible:
        read_tagged(r, tagged, out, version)
    for f in s.fields:  # absent fields (other versions, tags not sent) get their default
        if f.key not in out:
            out[f.key] = f.default_value(version)
    return out



# ---- encoding

class Writer:
    """Small fields go into a bytearray; record views are kept as their own parts."""

    __slots__ = ("cur", "parts")

    def __init__(self) -> None:
        self.parts: list = []
        self.cur = bytearray()

    def uvarint(self, value: int) -> None:
        cur = self.cur
        while value >= 0x80:
            cur.append((value & 0x7F) | 0x80)
            value >>= 7
        cur.append(value)

    def length(self, n: int, flexible: bool, wide: bool) -> None:
        if flexible:
            self.uvarint(n + 1)
        else:
            self.cur += (_I32 if wide else _I16).pack(n)

    def view(self, data) -> None:
        if self.cur:
            self.parts.append(self.cur)
            self.cur = bytearray()
        self.parts.append(data)

    def finish(self) -> list:
        if self.cur:
            self.parts.append(self.cur)
        return self.parts


def _write_value(w: Writer, type_: str, value, f: Field, version: int, flexible: bool) -> None:
    s = _PRIMITIVES.get(type_)
    if s is not None:
        w.cur += s.pack(value)
        return
    if type_ == "uuid":
        w.cur += value
        return
    if value is None:
        if f.nullable(version):
            w.length(-1, flexible, type_ != "string")
            return
        value = "" if type_ == "string" else b""  # a version without null: empty, as Kafka
    if type_ == "string":
        data = value.encode("utf-8")
        w.length(len(data), flexible, False)
        w.cur += data
        return
    n = part_nbytes(value)
    w.length(n, flexible, True)
    if type_ == "records" and n:
        w.view(value)
    else:
        w.cur += value


def part_nbytes(part) -> int:
    """The size of a buffer, or of a region whose bytes stay in their file until sent (it is
    no buffer, and says its own `nbytes`)."""
    try:
        return memoryview(part).nbytes
    except TypeError:
        return part.nbytes


def _write_field(w: Writer, f: Field, value, version: int, flexible: bool) -> None:
    if f.type == "struct":
        write_struct(w, f.struct, value, version, flexible)
    elif f.type != "array":
        _write_value(w, f.type, value, f, version, flexible)
    elif value is None and f.nullable(version):
        w.length(-1, flexible, True)
    else:
        value = value or ()
        w.length(len(value), flexible, True)
        for item in value:
            if f.elem == "struct":
                write_struct(w, f.struct, item, version, flexible)
            else:
                _write_value(w, f.elem, item, f, version, flexible)


def write_struct(w: Writer, s: Struct, value: dict, version: int, flexible: bool) -> None:
    body, tagged = s.plan(version, flexible)
    for f in body:
        v = value.get(f.key, _MISSING)
        _write_field(w, f, f.default_value(version) if v is _MISSING else v, version, flexible)
    if not flexible:
        return
    present = []
    for tag in sorted(tagged):
        f = tagged[tag]
        v = value.get(f.key, _MISSING)
        if v is _MISSING or v == f.default_value(version):
            continue  # a tagged field at its default is not sent
        sub = Writer()
        _write_field(sub, f, v, version, True)
        present.append((tag, b"".join(sub.finish())))
    w.uvarint(len(present))
    for tag, data in present:
        w.uvarint(tag)
        w.uvarint(len(data))
        w.cur += data


_MISSING = object()


def encode_message(schema: Struct, version: int, value: dict, *, flexible: bool) -> bytes:
    """One message (no header, no size) in `version`; absent fields take their default."""
    w = Writer()
    write_struct(w, schema, value, version, flexible)
    return b"".join(bytes(p) for p in w.finish())


def decode_message(buf, schema: Struct, version: int, *, flexible: bool, what: str,
                   error: type[KafkaEngineError] = InvalidRequestError, pos: int = 0,
                   end: int | None = None) -> dict:
    """The message filling `buf[pos:end]` exactly; bytes left over are an `error`."""
    r = Reader(buf, pos, len(buf) if end is None else end, what, error)
    out = read_struct(r, schema, version, flexible)
    if r.pos != r.end:
        r.fail("(end)", f"{r.end - r.pos} bytes left over")
    return out
