from os import PathLike
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

from engine._native.errors import IndexFullError, InvalidOffsetError

_I64: TypeAlias = npt.NDArray[np.int64]

STATUS_OFFSET_NOT_INCREASING: Final[int]
STATUS_OFFSET_OVERFLOW: Final[int]
STATUS_POSITION_OVERFLOW: Final[int]
STATUS_OFFSET_INDEX_FULL: Final[int]
STATUS_TIME_INDEX_FULL: Final[int]
STATUS_TIME_OFFSET_DECREASING: Final[int]
STATUS_TIME_DECREASING: Final[int]

def append_status_message(status: int) -> str: ...
def status_error(status: int, message: str, *, file: str | PathLike[str] | None = None,
                 position: int | None = None,
                 offset: int | None = None) -> IndexFullError | InvalidOffsetError | ValueError: ...
def rebuild_entries(sizes: _I64, last_offsets: _I64, max_timestamps: _I64, base_offset: int,
                    interval_bytes: int, max_offset_entries: int,
                    max_time_entries: int) -> tuple[_I64, _I64, _I64, _I64]: ...
