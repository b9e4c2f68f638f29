"""Fuzz target for the record decoder (atheris, i.e. libFuzzer driving Python).

Long run, from the repository root (seeds are written into the corpus folder when it is empty;
build/ is ignored by git):

    python tests/fuzz/fuzz_records.py -max_total_time=3600 -rss_limit_mb=2048 -timeout=10 \\
        build/fuzz-corpus/

Each input is handed to every decoding entry point: `scan_batches` (with CRCs), `MemoryRecords`
`.validate()`, `.batches()` then each batch's `.records()` and header properties,
`.decode_columns()` (per batch, so it can be compared with the records path; copied and as
views), and the codec entry point `decompress()` on the raw bytes. The only exceptions
expected are KafkaEngineError and its subclasses, and each must name a position inside the
input (and, for an error about a batch, that batch's position range and base offset); the
records path and the columns path must agree on every batch. Anything else is a finding:
another exception type (reported by atheris as an uncaught exception), a crash (signal), a
hang (-timeout) or memory growth past -rss_limit_mb. Decompression is bounded at 1 MiB per
batch here, so a bomb that is not stopped at the limit shows up as RSS growth.

Structure-aware mutations (the custom mutator): libFuzzer's byte mutations, then, in most
rounds, the framing is repaired (the last entry's size fitted to the bytes left, every CRC-32C /
CRC-32 recomputed) so the fuzzer gets past the CRC check into the record parser and the codecs;
in some rounds the records section of a compressed batch (or the inner message set of a legacy
wrapper) is decompressed, mutated, and compressed again, so the parser sees damaged records
inside a valid codec stream. Seeds: v2 batches of every codec (headers, nulls, control batches,
LogAppendTime, delete horizon) and legacy v0/v1 messages and wrappers.

What is instrumented: `atheris.instrument_imports` instruments the engine's Python code
(engine.records, engine.errors) for coverage. The compiled modules (engine._native.*, i.e.
batch.c and the Cython .pxi code) are NOT instrumented by the normal build, so libFuzzer gets no
coverage feedback from them; it still catches their crashes, hangs and memory growth as
above, and the structure-aware mutator does much of the steering. For coverage of the native
code build the extension with clang's `-fsanitize=fuzzer-no-link` (plus `address` to catch
memory errors, and `undefined` in trap mode, which needs no runtime, to stop on signed
overflow, bad shifts and null pointer arithmetic) in a separate copy of the tree and preload
atheris's ASan runtime, e.g.:

    CC=clang LDSHARED="clang -shared -fsanitize=address,fuzzer-no-link" \\
    CFLAGS="-fsanitize=address,undefined,fuzzer-no-link -fsanitize-trap=undefined \\
            -fno-sanitize=vptr,function,alignment -g -O1" \\
        python setup.py build_ext --inplace --build-temp build/tmp-fuzz
    LD_PRELOAD="$(python -c 'import atheris; print(atheris.path())')/asan_with_fuzzer.so" \\
        ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \\
        python tests/fuzz/fuzz_records.py -max_total_time=3600 build/fuzz-corpus/

(never build the instrumented modules into the shared work tree: `--inplace` replaces the .so
files everyone imports). With the preloaded libFuzzer the custom mutator below is not picked up
(libFuzzer looks for it in the executable), so that run relies on libFuzzer's own mutations
and its comparison tracing, which does find CRCs; the plain run above uses the mutator.
"""

from __future__ import annotations

import os
import struct
import sys

import atheris
import pyarrow as pa

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_TESTS)
for _path in (_ROOT, _TESTS):  # the engine, and the tests' shared encoders (kafka_format)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from kafka_format import fix_crc  # noqa: E402 - needs the path above

with atheris.instrument_imports(include=["engine"]):
    from engine._native import records as native
    from engine.errors import KafkaEngineError
    from engine.records import MemoryRecords, RecordBatchBuilder, compress, decompress


LIMIT = 1 << 20  # max_decompressed_bytes for every decode here


class Finding(AssertionError):
    """An error that is typed but not located, or paths that disagree."""


# ---------------------------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------------------------


def _v2_seeds():
    out = []
    for codec in range(5):
        b = RecordBatchBuilder(base_offset=100, compression_type=codec, producer_id=5,
                               producer_epoch=1, base_sequence=7)
        b.append(b"value", key=b"key", headers=[("h", b"v"), ("n", None)], timestamp=1000)
        b.append(None, key=None, timestamp=999)
        b.append(b"", key=b"", headers=[("", b"")], timestamp=2**40)
        out.append(b.build())
    b = RecordBatchBuilder(base_offset=7, timestamp_type=1, log_append_time=55)
    b.append(b"x", timestamp=1)
    out.append(b.build())
    b = RecordBatchBuilder(base_offset=9, delete_horizon_ms=12345)
    b.append(None, key=b"tomb", timestamp=1)
    out.append(b.build())
    from engine.records import build_end_txn_marker
    out.append(build_end_txn_marker(True, base_offset=20, producer_id=5, producer_epoch=1))
    out.append(RecordBatchBuilder(base_offset=3).build())  # empty batch
    return out


def _legacy_seeds():
    try:
        from kafka.record.legacy_records import LegacyRecordBatchBuilder
    except ImportError:
        return []
    out = []
    for magic in (0, 1):
        for codec in range(4):
            builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec,
                                               batch_size=1 << 16)
            builder.append(0, timestamp=1000, key=b"k", value=b"v")
            if codec:
                builder.append(1, timestamp=1001, key=None, value=b"w")
            out.append(bytes(builder.build()))
    return out


def seeds():
    singles = _v2_seeds() + _legacy_seeds()
    return singles + [b"".join(singles[:4]), b"".join(singles[-4:]), singles[0] + singles[0][:40]]


def _write_seeds(argv):
    dirs = [a for a in argv[1:] if not a.startswith("-")]
    if not dirs:
        return
    corpus = dirs[0]
    os.makedirs(corpus, exist_ok=True)
    if os.listdir(corpus):
        return
    for i, seed in enumerate(seeds()):
        with open(os.path.join(corpus, f"seed-{i:03d}"), "wb") as f:
            f.write(seed)


# ---------------------------------------------------------------------------------------------
# Structure-aware mutation
# ---------------------------------------------------------------------------------------------


def _entries(buf):
    pos, n = 0, len(buf)
    while n - pos >= 17:
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        if size < 14 or size + 12 > n - pos:
            return
        yield pos, size + 12, buf[pos + 16]
        pos += size + 12


def repair(buf: bytearray, fit_last: bool) -> bytearray:
    """Fits the last entry's size to the bytes left and recomputes every CRC."""
    if fit_last:
        pos, n = 0, len(buf)
        while n - pos >= 26:
            size = struct.unpack_from(">i", buf, pos + 8)[0]
            if size < 14 or size + 12 > n - pos:
                struct.pack_into(">i", buf, pos + 8, n - pos - 12)
                break
            pos += size + 12
    for pos, size, magic in list(_entries(buf)):
        if (magic == 2 and size >= 61) or magic in (0, 1):
            fix_crc(buf, pos)
    return buf


def _legacy_value(buf, pos, size):
    """(start, length) of a legacy message's value, or None."""
    at = pos + 18 + (8 if buf[pos + 16] == 1 else 0)
    if at + 4 > pos + size:
        return None
    klen = struct.unpack_from(">i", buf, at)[0]
    at += 4 + max(klen, 0)
    if at + 4 > pos + size:
        return None
    vlen = struct.unpack_from(">i", buf, at)[0]
    if vlen < 0 or at + 4 + vlen != pos + size:
        return None
    return at + 4, vlen


def mutate_inside_codec(buf: bytearray, max_size: int, seed: int) -> bytearray | None:
    """Decompresses one compressed entry's content, mutates it, compresses it back."""
    entries = [e for e in _entries(buf)]
    if not entries:
        return None
    pos, size, magic = entries[seed % len(entries)]
    if magic == 2:
        if size < 61:
            return None
        codec = buf[pos + 22] & 7
        start, length = pos + 61, size - 61
    elif magic in (0, 1):
        codec = buf[pos + 17] & 7
        value = _legacy_value(buf, pos, size)
        if value is None:
            return None
        start, length = value
    else:
        return None
    if not 1 <= codec <= 4:
        return None
    try:
        plain = bytes(decompress(codec, bytes(buf[start:start + length]), LIMIT, magic))
    except KafkaEngineError:
        return None
    mutated = atheris.Mutate(plain, max(len(plain) * 2, 64))
    try:
        packed = compress(codec, mutated)
    except Exception:  # noqa: BLE001 - compressing arbitrary bytes is not what is tested here
        return None
    out = bytearray(buf[:start]) + packed + buf[start + length:]
    delta = len(packed) - length
    struct.pack_into(">i", out, pos + 8, size - 12 + delta)
    if magic != 2:
        struct.pack_into(">i", out, start - 4, len(packed))
    if len(out) > max_size:
        return None
    return out


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    choice = seed % 8
    if choice == 0:  # plain libFuzzer mutation, CRCs left as they come out
        return atheris.Mutate(data, max_size)
    if choice == 1:
        out = mutate_inside_codec(bytearray(data), max_size, seed >> 3)
        if out is not None:
            return bytes(repair(out, False))
    out = bytearray(atheris.Mutate(data, max_size))
    return bytes(repair(out, fit_last=choice >= 4))


# ---------------------------------------------------------------------------------------------
# The target
# ---------------------------------------------------------------------------------------------


def _located(exc: KafkaEngineError, lo: int, hi: int, offset=None, what=""):
    if not isinstance(exc, KafkaEngineError):
        raise exc
    if exc.position is None or not lo <= exc.position <= hi:
        raise Finding(f"{what}: {exc!r} position {exc.position} outside [{lo}, {hi}]") from exc
    if offset is not None and exc.offset != offset and not (offset < 0 and exc.offset is None):
        raise Finding(f"{what}: {exc!r} offset {exc.offset}, batch base offset {offset}") from exc


def _record_tuple(r):
    return (r.offset, r.timestamp, r.key, r.value, r.headers)


def _columns_tuples(cols):
    c = cols._c

    def binary(name, j):
        if not (c[f"{name}_validity"][j >> 3] >> (j & 7)) & 1:
            return None
        offs = c[f"{name}_offsets"]
        return bytes(c[f"{name}_data"][offs[j]:offs[j + 1]])

    out = []
    for i in range(cols.num_records):
        hs = tuple((bytes(c["header_key_data"][c["header_key_offsets"][j]:
                                               c["header_key_offsets"][j + 1]])
                    .decode("utf-8", "surrogateescape"), binary("header_value", j))
                   for j in range(c["header_offsets"][i], c["header_offsets"][i + 1]))
        out.append((int(cols.offset[i]), int(cols.timestamp[i]), binary("key", i),
                    binary("value", i), hs))
    return out


_RAW_HEADERS = pa.list_(pa.struct([("key", pa.binary_view()), ("value", pa.binary_view())]))


def _view_columns_tuples(cols):
    """_columns_tuples of view columns (header keys read as bytes: fuzzed ones need not be
    UTF-8, which a string view array will not convert)."""
    headers = cols.header_lists().view(_RAW_HEADERS).to_pylist()
    return [(int(o), int(t), k, v,
             tuple((h["key"].decode("utf-8", "surrogateescape"), h["value"]) for h in hs))
            for o, t, k, v, hs in zip(cols.offset, cols.timestamp, cols.keys().to_pylist(),
                                      cols.values().to_pylist(), headers)]


def one_input(data: bytes) -> None:
    n = len(data)
    if n:
        # the codec entry point on raw bytes (codec and magic from the first byte)
        try:
            decompress(1 + data[0] % 4, data[1:], LIMIT, 2 - (data[0] >> 6) % 3)
        except KafkaEngineError:
            pass
    mr = MemoryRecords(data, max_decompressed_bytes=LIMIT)
    try:
        headers = mr.scan(verify_crc=True)
    except KafkaEngineError as exc:
        _located(exc, 0, n, what="scan")
        for call in (mr.validate, lambda: mr.decode_columns(verify_crc=False)):
            try:
                call()
            except KafkaEngineError as again:
                if (again.position, again.offset) != (exc.position, exc.offset):
                    raise Finding(f"scan said {exc!r}, then {again!r}") from again
            else:
                raise Finding(f"scan raised {exc!r} but a later call did not")
        return
    if mr.valid_bytes + mr.partial_bytes != n:
        raise Finding("valid + partial bytes != buffer length")
    try:
        mr.validate()
    except KafkaEngineError as exc:
        bad = [int(p) for p in headers["position"][~headers["crc_valid"]]]
        if not bad or exc.position != bad[0]:
            raise Finding(f"validate: {exc!r}, bad CRCs at {bad}") from exc
    else:
        if not bool(headers["crc_valid"].all()):
            raise Finding("validate passed with a bad CRC in the scan")
    for i, batch in enumerate(mr.batches()):
        h = batch.header()
        pos, size, base = int(h["position"]), int(h["size"]), int(h["base_offset"])
        # header-derived properties never fail except for a typed reason
        for name in ("magic", "last_offset", "next_offset", "crc", "attributes",
                     "timestamp_type", "is_transactional", "is_control", "delete_horizon_ms",
                     "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                     "base_sequence", "last_sequence", "partition_leader_epoch",
                     "compression_type"):
            try:
                getattr(batch, name)
            except KafkaEngineError as exc:
                _located(exc, pos, pos + size, base, name)
        try:
            recs = [_record_tuple(r) for r in batch.records()]
        except KafkaEngineError as exc:
            _located(exc, pos, pos + size, base, "records")
            for views in (False, True):
                try:
                    mr.decode_columns(i, i + 1, verify_crc=False, views=views)
                except KafkaEngineError as col:
                    if ((type(col), col.position, col.offset)
                            != (type(exc), exc.position, exc.offset)):
                        raise Finding(f"records raised {exc!r}, columns {col!r} "
                                      f"(views={views})") from col
                else:
                    raise Finding(f"records raised {exc!r}, columns decoded "
                                  f"(views={views})") from exc
            continue
        try:
            cols = mr.decode_columns(i, i + 1, verify_crc=False)
            view_cols = mr.decode_columns(i, i + 1, verify_crc=False, views=True)
        except KafkaEngineError as col:
            raise Finding(f"records decoded, columns raised {col!r}") from col
        if _columns_tuples(cols) != recs:
            raise Finding(f"records and columns disagree on batch {i}")
        if _view_columns_tuples(view_cols) != recs:
            raise Finding(f"view columns and copied columns disagree on batch {i}")
        if batch.magic == 2 and len(recs) != batch.record_count:
            raise Finding("v2 batch decoded a number of records other than its count")
        try:
            section = batch.records_section()
        except KafkaEngineError as exc:
            _located(exc, pos, pos + size, base, "records_section")
        else:  # records from a section decompressed ahead of time: the same
            if [_record_tuple(r) for r in batch.records(section)] != recs:
                raise Finding(f"records(records_section()) differs on batch {i}")
    try:
        native.batches(data, True, LIMIT)
    except KafkaEngineError as exc:
        raise Finding(f"native.batches raised {exc!r} after a clean scan") from exc


def TestOneInput(data: bytes) -> None:
    one_input(data)


def main(argv):
    _write_seeds(argv)
    atheris.Setup(argv, TestOneInput, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
