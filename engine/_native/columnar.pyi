from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

from engine._native.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES as DEFAULT_MAX_DECOMPRESSED_BYTES
from engine._native.scan import BufferView

def decode_columns(data: Buffer | BufferView, headers: npt.NDArray[np.void] | None = None,
                   start: int = 0,
                   stop: int = -1, min_offset: int = -1, max_offset: int = -1,
                   include_control: bool = True, verify_crc: bool = True,
                   max_decompressed_bytes: int = ..., with_keys: bool = True,
                   with_values: bool = True, with_headers: bool = True,
                   fuse_crc: bool = True) -> dict[str, Any]: ...
def decode_view_columns(data: Buffer | BufferView, headers: npt.NDArray[np.void] | None = None,
                        start: int = 0, stop: int = -1, min_offset: int = -1,
                        max_offset: int = -1, include_control: bool = True,
                        verify_crc: bool = True,
                        max_decompressed_bytes: int = ...) -> dict[str, Any]: ...
