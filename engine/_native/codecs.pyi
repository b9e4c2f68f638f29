import enum
from typing import Final

from typing_extensions import Buffer

DEFAULT_MAX_DECOMPRESSED_BYTES: Final[int]

class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4
    @property
    def name_kafka(self) -> str: ...

def codec_name(codec: int) -> str: ...
def decompress(codec: int, data: Buffer, limit: int = ..., magic: int = 2, position: int = -1,
               offset: int = -1) -> bytes | bytearray: ...
def compress(codec: int, data: Buffer, level: int = -1) -> bytes: ...

class Scratch:
    """A reused per-thread output buffer (no Python-level API)."""

def _codec_c_api(enabled: bool | None = None) -> dict[str, bool]: ...
