"""The segment manifest (`.rsm-manifest`) of the object-store tier: the Aiven plugin's JSON,
version 1, read as strictly as the plugin reads it and written as it writes it.

    {"version":"1",
     "chunkIndex":{"type":"fixed","originalChunkSize":C,"originalFileSize":F,
                   "transformedChunkSize":T,"finalTransformedChunkSize":Tf}
               | {"type":"variable","originalChunkSize":C,"originalFileSize":F,
                   "transformedChunks":"<base64 of a zstd frame of ChunkSizesBinaryCodec>"},
     "segmentIndexes":{"offset":{"position":p,"size":s},"timestamp":{...},
                       "producerSnapshot":{...},"leaderEpoch":{...},"transaction":{...}|null},
     "compression":bool,
     "encryption":{"dataKey":"<keyPairId>:<base64 RSA-wrapped AES key>","aad":"<base64>"},
     "remoteLogSegmentMetadata":{...}}

- The `.log` object is the segment cut into chunks of C original bytes (the last one
  shorter), each transformed on its own (see `transforms`) and concatenated. Chunk i covers
  original bytes [i*C, min((i+1)*C, F)); its transformed bytes follow those of chunk i-1.
  F == 0 is a single empty chunk.
- A *fixed* index (no compression) gives every transformed chunk size T but the last (Tf);
  a *variable* index (compression) lists them all: count:int32, then for count == 1 the
  value:int32, else base:int32 (the least of all but the last), bytesPerValue:uint8 (1..4),
  count-1 values of that many bytes (unsigned, big-endian, minus base) and the last value
  as int32; all big-endian, in one zstd frame that states its content size (at most
  10 MiB), base64 (standard alphabet, padded when written, padding optional on read).
- `segmentIndexes` place each Kafka index inside the `.indexes` object (transformed sizes;
  an empty index takes no bytes). `transaction` is null when the segment had none.
- `encryption` is absent without encryption. `remoteLogSegmentMetadata` is written for
  people reading the bucket and ignored on read.

Reading is strict (the plugin's Jackson mapping refuses unknown properties, so a manifest we
accept it accepts too), and every number is checked before it sizes anything: a manifest
over 16 MiB, bad JSON, a duplicate or unknown key, a count that does not match the file
size, sizes that do not add up to what the transforms produce, negative values, values past
int32, or a chunk-index frame over 10 MiB raise CorruptRemoteObjectError naming the object,
with memory bounded by those limits. `check_transformed_sizes` further checks a fixed
index against its transforms (the plugin does not; its own test manifests would fail).
"""

from __future__ import annotations

import abc
import base64
import binascii
import json
import math
from dataclasses import dataclass

import numpy as np
import zstandard

from engine.errors import CorruptRemoteObjectError
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.storage import IndexType

__all__ = [
    "GCM_OVERHEAD",
    "MAX_MANIFEST_BYTES",
    "MAX_TRANSFORMED_CHUNKS_BYTES",
    "Chunk",
    "ChunkIndex",
    "EncryptionMetadata",
    "FixedChunkIndex",
    "SegmentIndex",
    "SegmentIndexes",
    "SegmentManifest",
    "VariableChunkIndex",
    "decode_chunk_sizes",
    "encode_chunk_sizes",
]

INT32_MAX = 2**31 - 1
#: The plugin's limit on the decompressed chunk-size codec (TransformedChunksDeserializer).
MAX_TRANSFORMED_CHUNKS_BYTES = 10 * 1024 * 1024
#: Manifests are read whole; none the plugin writes comes near this (a 10 MiB chunk-size
#: codec of incompressible values is 13.4 MiB of base64).
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
IV_SIZE = 12
TAG_SIZE = 16
#: What AES-GCM adds to a chunk: the IV in front, the tag behind.
GCM_OVERHEAD = IV_SIZE + TAG_SIZE
_MAX_WRAPPED_KEY_BYTES = 2048  # RSA-16384; real keys are 256 or 512 bytes
_MAX_AAD_BYTES = 1024
_ZSTD_LEVEL = 3  # zstd-jni's default, as the plugin compresses

# JSON names of the index types, in `.indexes` order.
_INDEX_FIELDS = (
    (IndexType.OFFSET, "offset"),
    (IndexType.TIMESTAMP, "timestamp"),
    (IndexType.PRODUCER_SNAPSHOT, "producerSnapshot"),
    (IndexType.LEADER_EPOCH, "leaderEpoch"),
    (IndexType.TRANSACTION, "transaction"),
)


class _Bad(ValueError):
    """A format violation found while parsing; turned into CorruptRemoteObjectError with the
    object key at the boundary."""


# ---- chunk-size codec --------------------------------------------------------------------

def encode_chunk_sizes(sizes) -> bytes:
    """The plugin's ChunkSizesBinaryCodec encoding of `sizes` (non-negative int32s)."""
    sizes = [int(s) for s in sizes]
    count = len(sizes)
    if any(not 0 <= s <= INT32_MAX for s in sizes):
        raise ValueError("chunk sizes must be int32 values >= 0")
    if count == 0:
        return (0).to_bytes(4, "big")
    if count == 1:
        return (1).to_bytes(4, "big") + sizes[0].to_bytes(4, "big")
    body = sizes[:-1]
    base = min(body)
    width = max(max(1, (s - base).bit_length() + 7 >> 3) for s in body)
    out = bytearray(count.to_bytes(4, "big") + base.to_bytes(4, "big") + bytes((width,)))
    for s in body:
        out += (s - base).to_bytes(width, "big")
    out += sizes[-1].to_bytes(4, "big")
    return bytes(out)


def decode_chunk_sizes(data: bytes, expected_count: int | None = None) -> np.ndarray:
    """The sizes (int64 array) of a ChunkSizesBinaryCodec encoding. The length of `data` must
    be exactly what its header says, and the count `expected_count` when given (checked
    before anything is allocated). ValueError otherwise."""
    n = len(data)
    if n < 4:
        raise _Bad(f"chunk sizes: {n} bytes, need at least 4 for the count")
    count = int.from_bytes(data[:4], "big", signed=True)
    if count < 0:
        raise _Bad(f"chunk sizes: negative count {count}")
    if expected_count is not None and count != expected_count:
        raise _Bad(f"chunk sizes: count {count}, but the file and chunk sizes give "
                   f"{expected_count} chunks")
    if count == 0:
        if n != 4:
            raise _Bad(f"chunk sizes: count 0 followed by {n - 4} bytes")
        return np.zeros(0, np.int64)
    if count == 1:
        if n != 8:
            raise _Bad(f"chunk sizes: count 1 needs 8 bytes, got {n}")
        last = int.from_bytes(data[4:8], "big", signed=True)
        if last < 0:
            raise _Bad(f"chunk sizes: negative size {last} of chunk 0")
        return np.array([last], np.int64)
    if n < 9:
        raise _Bad(f"chunk sizes: {n} bytes, the header of {count} sizes needs 9")
    base = int.from_bytes(data[4:8], "big", signed=True)
    width = data[8]
    if base < 0:
        raise _Bad(f"chunk sizes: negative base {base}")
    if not 1 <= width <= 4:
        raise _Bad(f"chunk sizes: {width} bytes per value (1..4 allowed)")
    need = 9 + (count - 1) * width + 4
    if n != need:
        raise _Bad(f"chunk sizes: {count} values of {width} bytes need {need} bytes, "
                   f"got {n}")
    packed = np.frombuffer(data, np.uint8, (count - 1) * width, 9).reshape(count - 1, width)
    values = np.zeros(count, np.int64)
    for col in range(width):
        values[:-1] = (values[:-1] << 8) | packed[:, col]
    values[:-1] += base
    last = int.from_bytes(data[n - 4:], "big", signed=True)
    if last < 0:
        raise _Bad(f"chunk sizes: negative size {last} of chunk {count - 1}")
    values[-1] = last
    if count > 1 and int(values[:-1].max()) > INT32_MAX:
        bad = int(np.argmax(values[:-1] > INT32_MAX))
        raise _Bad(f"chunk sizes: size of chunk {bad} overflows int32")
    return values


def _encode_transformed_chunks(sizes) -> str:
    raw = encode_chunk_sizes(sizes)
    if len(raw) > MAX_TRANSFORMED_CHUNKS_BYTES:
        raise ValueError(f"the chunk-size index of {len(sizes)} chunks is {len(raw)} bytes, "
                         f"over the {MAX_TRANSFORMED_CHUNKS_BYTES}-byte limit: raise chunk.size")
    frame = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_content_size=True,
                                     write_checksum=False).compress(raw)
    return base64.b64encode(frame).decode("ascii")


def _decode_transformed_chunks(text: str, expected_count: int) -> np.ndarray:
    frame = _b64(text, "chunkIndex.transformedChunks")
    try:
        size = zstandard.get_frame_parameters(frame).content_size
    except zstandard.ZstdError as exc:
        raise _Bad(f"chunkIndex.transformedChunks is not a zstd frame: {exc}") from None
    if size == zstandard.CONTENTSIZE_UNKNOWN or size == zstandard.CONTENTSIZE_ERROR:
        raise _Bad("chunkIndex.transformedChunks: the zstd frame does not state its size")
    if size > MAX_TRANSFORMED_CHUNKS_BYTES:
        raise _Bad(f"chunkIndex.transformedChunks: {size} bytes decompressed, over the "
                   f"{MAX_TRANSFORMED_CHUNKS_BYTES}-byte limit")
    if size < 4:
        raise _Bad(f"chunkIndex.transformedChunks: {size} bytes decompressed, need 4")
    try:
        raw = zstandard.ZstdDecompressor().decompress(frame, max_output_size=size,
                                                      allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise _Bad(f"chunkIndex.transformedChunks: bad zstd frame: {exc}") from None
    if len(raw) != size:
        raise _Bad(f"chunkIndex.transformedChunks: frame says {size} bytes, gave {len(raw)}")
    return decode_chunk_sizes(raw, expected_count)


# ---- chunk indexes -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: its id, original byte range and transformed byte range in the `.log`."""

    id: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int

    @property
    def original_end(self) -> int:
        return self.original_position + self.original_size

    @property
    def transformed_end(self) -> int:
        return self.transformed_position + self.transformed_size


class ChunkIndex(abc.ABC):
    """Where each chunk's original and transformed bytes are. Subclasses give the
    transformed sizes."""

    __slots__ = ("chunk_count", "original_chunk_size", "original_file_size")

    def __init__(self, original_chunk_size: int, original_file_size: int):
        self.original_chunk_size = original_chunk_size
        self.original_file_size = original_file_size
        # F == 0 is one empty chunk
        self.chunk_count = max(1, -(-original_file_size // original_chunk_size))

    def original_size(self, i: int) -> int:
        if i == self.chunk_count - 1:
            return self.original_file_size - i * self.original_chunk_size
        return self.original_chunk_size

    @abc.abstractmethod
    def transformed_position(self, i: int) -> int:
        """Where chunk i starts in the `.log` object."""

    @abc.abstractmethod
    def transformed_size(self, i: int) -> int:
        """Bytes of chunk i in the `.log` object."""

    @property
    def transformed_file_size(self) -> int:
        """Bytes of the `.log` object."""
        last = self.chunk_count - 1
        return self.transformed_position(last) + self.transformed_size(last)

    def chunk(self, i: int) -> Chunk:
        if not 0 <= i < self.chunk_count:
            raise IndexError(f"chunk {i} of {self.chunk_count}")
        return Chunk(i, i * self.original_chunk_size, self.original_size(i),
                     self.transformed_position(i), self.transformed_size(i))

    def chunk_ids(self, start: int, end_exclusive: int) -> range:
        """Ids of the chunks holding original bytes [start, end_exclusive) (clamped to the
        file; empty for an empty range)."""
        end = min(end_exclusive, self.original_file_size)
        if start < 0 or start >= end:
            return range(0)
        c = self.original_chunk_size
        return range(start // c, (end - 1) // c + 1)

    # the ChunkRanges protocol of `reads` (half-open ranges)
    def original_range(self, i: int) -> tuple[int, int]:
        start = i * self.original_chunk_size
        return start, start + self.original_size(i)

    def transformed_range(self, i: int) -> tuple[int, int]:
        start = self.transformed_position(i)
        return start, start + self.transformed_size(i)

    def chunks_for(self, original_start: int, original_end: int) -> range:
        return self.chunk_ids(original_start, original_end)

    @abc.abstractmethod
    def to_json_obj(self) -> dict:
        """The manifest's `chunkIndex` object."""

    def _identity(self) -> tuple:
        return (type(self), self.original_chunk_size, self.original_file_size,
                tuple(self.transformed_size(i) for i in range(self.chunk_count)))

    def __eq__(self, other):
        return isinstance(other, ChunkIndex) and self._identity() == other._identity()

    def __hash__(self):
        return hash(self._identity())


class FixedChunkIndex(ChunkIndex):
    """Every transformed chunk `transformed_chunk_size` bytes but the last
    (`final_transformed_chunk_size`): no compression."""

    __slots__ = ("final_transformed_chunk_size", "transformed_chunk_size")

    def __init__(self, original_chunk_size: int, original_file_size: int,
                 transformed_chunk_size: int, final_transformed_chunk_size: int):
        super().__init__(original_chunk_size, original_file_size)
        self.transformed_chunk_size = transformed_chunk_size
        self.final_transformed_chunk_size = final_transformed_chunk_size

    def transformed_position(self, i: int) -> int:
        return i * self.transformed_chunk_size

    def transformed_size(self, i: int) -> int:
        if self.original_file_size == 0:
            return 0
        if i == self.chunk_count - 1:
            return self.final_transformed_chunk_size
        return self.transformed_chunk_size

    def to_json_obj(self) -> dict:
        return {"type": "fixed", "originalChunkSize": self.original_chunk_size,
                "originalFileSize": self.original_file_size,
                "transformedChunkSize": self.transformed_chunk_size,
                "finalTransformedChunkSize": self.final_transformed_chunk_size}

    def __repr__(self):
        return (f"FixedChunkIndex(C={self.original_chunk_size}, F={self.original_file_size}, "
                f"T={self.transformed_chunk_size}, Tf={self.final_transformed_chunk_size})")


class VariableChunkIndex(ChunkIndex):
    """Each transformed chunk's size listed: compression."""

    __slots__ = ("_positions", "_sizes")

    def __init__(self, original_chunk_size: int, original_file_size: int, transformed_sizes):
        super().__init__(original_chunk_size, original_file_size)
        sizes = np.asarray(transformed_sizes, np.int64)
        if len(sizes) != self.chunk_count:
            raise ValueError(f"{len(sizes)} chunk sizes for {self.chunk_count} chunks")
        self._sizes = sizes
        self._positions = np.concatenate(([0], np.cumsum(sizes)))

    @property
    def transformed_sizes(self) -> np.ndarray:
        return self._sizes

    def transformed_position(self, i: int) -> int:
        return int(self._positions[i])

    def transformed_size(self, i: int) -> int:
        return int(self._sizes[i])

    def to_json_obj(self) -> dict:
        return {"type": "variable", "originalChunkSize": self.original_chunk_size,
                "originalFileSize": self.original_file_size,
                "transformedChunks": _encode_transformed_chunks(self._sizes.tolist())}

    def __repr__(self):
        return (f"VariableChunkIndex(C={self.original_chunk_size}, F={self.original_file_size}"
                f", chunks={self.chunk_count}, transformed={self.transformed_file_size})")


# ---- indexes and encryption --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """One Kafka index inside the `.indexes` object (transformed bytes)."""

    position: int
    size: int


@dataclass(frozen=True, slots=True)
class SegmentIndexes:
    offset: SegmentIndex
    timestamp: SegmentIndex
    producer_snapshot: SegmentIndex
    leader_epoch: SegmentIndex
    transaction: SegmentIndex | None

    def get(self, index_type: IndexType) -> SegmentIndex | None:
        return {IndexType.OFFSET: self.offset, IndexType.TIMESTAMP: self.timestamp,
                IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot,
                IndexType.LEADER_EPOCH: self.leader_epoch,
                IndexType.TRANSACTION: self.transaction}[index_type]

    @property
    def total_size(self) -> int:
        """Bytes of the `.indexes` object."""
        return max((i.position + i.size for i in (self.offset, self.timestamp,
                                                  self.producer_snapshot, self.leader_epoch,
                                                  self.transaction) if i is not None),
                   default=0)

    def to_json_obj(self) -> dict:
        out = {}
        for index_type, name in _INDEX_FIELDS:
            entry = self.get(index_type)
            out[name] = None if entry is None else {"position": entry.position,
                                                    "size": entry.size}
        return out


@dataclass(frozen=True, slots=True)
class EncryptionMetadata:
    """The segment's data key, wrapped with key pair `key_id`'s RSA public key, and the
    segment's AAD. Neither is secret: the data key is only usable with the private key."""

    key_id: str
    wrapped_data_key: bytes
    aad: bytes

    def to_json_obj(self) -> dict:
        return {"dataKey": f"{self.key_id}:{base64.b64encode(self.wrapped_data_key).decode()}",
                "aad": base64.b64encode(self.aad).decode()}

    def __repr__(self):
        return (f"EncryptionMetadata(key_id={self.key_id!r}, "
                f"wrapped_data_key=<{len(self.wrapped_data_key)} bytes>, "
                f"aad=<{len(self.aad)} bytes>)")


# ---- the manifest ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """A parsed `.rsm-manifest` (see the module docstring)."""

    chunk_index: ChunkIndex
    segment_indexes: SegmentIndexes
    compression: bool
    encryption: EncryptionMetadata | None

    def to_json(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The manifest as the plugin writes it: compact JSON, keys in its order, with
        `metadata` as the informational remoteLogSegmentMetadata."""
        obj = {"version": "1", "chunkIndex": self.chunk_index.to_json_obj(),
               "segmentIndexes": self.segment_indexes.to_json_obj(),
               "compression": self.compression}
        if self.encryption is not None:
            obj["encryption"] = self.encryption.to_json_obj()
        obj["remoteLogSegmentMetadata"] = remote_log_segment_metadata_json(metadata)
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def check_transformed_sizes(self, object_key: str) -> None:
        """Checks the sizes against the transforms the manifest names: a variable index
        exactly with compression; a fixed index's chunks as the transforms make them (plain:
        T == C; encrypted: T == C + 28, the last chunk likewise); encrypted indexes larger
        than IV + tag. So a manifest that lies about them fails before any read. The plugin
        does not check this (its own test manifests do not hold it), so `parse` does not
        either. CorruptRemoteObjectError naming the key."""
        index = self.chunk_index
        fixed = isinstance(index, FixedChunkIndex)
        if fixed == self.compression:
            raise CorruptRemoteObjectError(
                f"segment manifest {object_key}: a {'fixed' if fixed else 'variable'}-size "
                f"chunk index with compression {'on' if self.compression else 'off'} (the "
                "plugin lists chunk sizes exactly when it compresses)", object_key=object_key)
        if self.encryption is not None:
            for index_type, name in _INDEX_FIELDS:
                entry = self.segment_indexes.get(index_type)
                if entry is not None and 0 < entry.size <= GCM_OVERHEAD:
                    raise CorruptRemoteObjectError(
                        f"segment manifest {object_key}: segmentIndexes.{name} of "
                        f"{entry.size} bytes cannot hold an encrypted index",
                        object_key=object_key)
        if not isinstance(index, FixedChunkIndex) or index.original_file_size == 0:
            return
        extra = GCM_OVERHEAD if self.encryption is not None else 0
        c, n = index.original_chunk_size, index.chunk_count
        last = index.original_size(n - 1)
        what = "encrypted chunks" if extra else "untransformed chunks"
        if n > 1 and index.transformed_chunk_size != c + extra:
            raise CorruptRemoteObjectError(
                f"segment manifest {object_key}: transformedChunkSize "
                f"{index.transformed_chunk_size}, but {what} of {c} bytes take {c + extra}",
                object_key=object_key)
        if index.final_transformed_chunk_size != last + extra:
            raise CorruptRemoteObjectError(
                f"segment manifest {object_key}: finalTransformedChunkSize "
                f"{index.final_transformed_chunk_size}, but the last chunk holds {last} bytes, "
                f"so {last + extra} as {what}", object_key=object_key)

    @classmethod
    def parse(cls, data: bytes, object_key: str) -> SegmentManifest:
        """The manifest in `data`, read from `object_key`. CorruptRemoteObjectError naming
        the key for anything the plugin would not read or that does not add up."""
        try:
            return _parse(data)
        except _Bad as exc:
            raise CorruptRemoteObjectError(f"segment manifest {object_key}: {exc}",
                                           object_key=object_key) from None


def remote_log_segment_metadata_json(metadata: RemoteLogSegmentMetadata) -> dict:
    """The plugin's informational remoteLogSegmentMetadata object."""
    segment_id = metadata.remote_log_segment_id
    tip = segment_id.topic_id_partition
    return {
        "remoteLogSegmentId": {
            "topicIdPartition": {"topicId": str(tip.topic_id),
                                 "topicPartition": {"topic": tip.topic,
                                                    "partition": tip.partition}},
            "id": str(segment_id.id)},
        "startOffset": metadata.start_offset,
        "endOffset": metadata.end_offset,
        "maxTimestampMs": metadata.max_timestamp_ms,
        "brokerId": metadata.broker_id,
        "eventTimestampMs": metadata.event_timestamp_ms,
        "segmentLeaderEpochs": {str(e): o for e, o in metadata.leader_epochs},
    }


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _Bad(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name):
    raise _Bad(f"{name} is not JSON")


def _parse(data: bytes) -> SegmentManifest:
    if len(data) > MAX_MANIFEST_BYTES:
        raise _Bad(f"{len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit")
    try:
        text = bytes(data).decode("utf-8")
        obj = json.loads(text, object_pairs_hook=_no_duplicates,
                         parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise _Bad(f"bad JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise _Bad("JSON nested too deeply") from None
    root = _obj(obj, "manifest", required=("version", "chunkIndex", "segmentIndexes",
                                           "compression"),
                optional=("encryption", "remoteLogSegmentMetadata"))
    if root["version"] != "1":
        raise _Bad(f"version {root['version']!r}: only \"1\" is known")
    compression = root["compression"]
    if not isinstance(compression, bool):
        raise _Bad(f"compression {compression!r} is not a boolean")
    encryption = _parse_encryption(root.get("encryption"))
    chunk_index = _parse_chunk_index(root["chunkIndex"], compression, encryption is not None)
    indexes = _parse_segment_indexes(root["segmentIndexes"])
    return SegmentManifest(chunk_index, indexes, compression, encryption)


def _obj(value, what: str, *, required: tuple, optional: tuple = ()) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{what} is {type(value).__name__}, not an object")
    missing = [k for k in required if k not in value]
    if missing:
        raise _Bad(f"{what} lacks {', '.join(missing)}")
    unknown = [k for k in value if k not in required and k not in optional]
    if unknown:
        raise _Bad(f"{what} has unknown {', '.join(map(repr, unknown))}")
    return value


def _int32(value, what: str, *, minimum: int = 0) -> int:
    if type(value) is not int:
        raise _Bad(f"{what} {value!r} is not an integer")
    if not minimum <= value <= INT32_MAX:
        raise _Bad(f"{what} {value} outside [{minimum}, {INT32_MAX}]")
    return value


def _b64(text, what: str) -> bytes:
    if not isinstance(text, str):
        raise _Bad(f"{what} is {type(text).__name__}, not a base64 string")
    stripped = text.rstrip("=")
    if len(text) - len(stripped) > 2:
        raise _Bad(f"{what}: too much base64 padding")
    try:
        return base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(f"{what} is not base64") from None


def _parse_encryption(value) -> EncryptionMetadata | None:
    if value is None:
        return None
    enc = _obj(value, "encryption", required=("dataKey", "aad"))
    data_key = enc["dataKey"]
    if not isinstance(data_key, str) or data_key.count(":") != 1:
        raise _Bad("encryption.dataKey is not <keyPairId>:<base64>")
    key_id, _, wrapped_text = data_key.partition(":")
    if not key_id.strip():
        raise _Bad("encryption.dataKey has a blank key pair id")
    wrapped = _b64(wrapped_text, "encryption.dataKey")
    if not 0 < len(wrapped) <= _MAX_WRAPPED_KEY_BYTES:
        raise _Bad(f"encryption.dataKey: a wrapped key of {len(wrapped)} bytes")
    aad = _b64(enc["aad"], "encryption.aad")
    if not 0 < len(aad) <= _MAX_AAD_BYTES:
        raise _Bad(f"encryption.aad of {len(aad)} bytes")
    return EncryptionMetadata(key_id, wrapped, aad)


def _parse_chunk_index(value, compression: bool, encrypted: bool) -> ChunkIndex:
    if not isinstance(value, dict):
        raise _Bad("chunkIndex is not an object")
    kind = value.get("type")
    if kind == "fixed":
        obj = _obj(value, "chunkIndex", required=(
            "type", "originalChunkSize", "originalFileSize", "transformedChunkSize",
            "finalTransformedChunkSize"))
    elif kind == "variable":
        obj = _obj(value, "chunkIndex", required=(
            "type", "originalChunkSize", "originalFileSize", "transformedChunks"))
    else:
        raise _Bad(f"chunkIndex.type {kind!r} (fixed or variable)")
    c = _int32(obj["originalChunkSize"], "chunkIndex.originalChunkSize", minimum=1)
    f = _int32(obj["originalFileSize"], "chunkIndex.originalFileSize")
    n = math.ceil(f / c) if f else 0
    if kind == "fixed":
        t = _int32(obj["transformedChunkSize"], "chunkIndex.transformedChunkSize")
        tf = _int32(obj["finalTransformedChunkSize"], "chunkIndex.finalTransformedChunkSize")
        index = FixedChunkIndex(c, f, t, tf)
        if n and (n - 1) * t + tf > INT32_MAX:
            raise _Bad(f"chunkIndex: {n} chunks of {t} bytes overflow int32 positions")
        return index
    if n == 0:
        raise _Bad("a variable chunk index of an empty file (the plugin cannot read one)")
    sizes = _decode_transformed_chunks(obj["transformedChunks"], n)
    minimum = 1 + (GCM_OVERHEAD if encrypted else 0)
    if int(sizes.min()) < minimum:
        bad = int(np.argmax(sizes < minimum))
        raise _Bad(f"chunkIndex.transformedChunks: chunk {bad} of {int(sizes[bad])} bytes "
                   f"cannot hold a{'n encrypted' if encrypted else ''} zstd frame")
    if int(sizes.sum()) > INT32_MAX:
        raise _Bad("chunkIndex.transformedChunks: the chunks overflow int32 positions")
    return VariableChunkIndex(c, f, sizes)


def _parse_segment_indexes(value) -> SegmentIndexes:
    names = tuple(name for _, name in _INDEX_FIELDS)
    obj = _obj(value, "segmentIndexes", required=names)
    entries: list[SegmentIndex | None] = []
    for index_type, name in _INDEX_FIELDS:
        entry = obj[name]
        if entry is None:
            if index_type is not IndexType.TRANSACTION:
                raise _Bad(f"segmentIndexes.{name} is null (only transaction may be)")
            entries.append(None)
            continue
        e = _obj(entry, f"segmentIndexes.{name}", required=("position", "size"))
        position = _int32(e["position"], f"segmentIndexes.{name}.position")
        size = _int32(e["size"], f"segmentIndexes.{name}.size")
        if position + size > INT32_MAX:
            raise _Bad(f"segmentIndexes.{name}: position {position} + size {size} "
                       "overflows int32")
        entries.append(SegmentIndex(position, size))
    return SegmentIndexes(*entries)
