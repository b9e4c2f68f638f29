from typing import Any, Final

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

#: One scan row per entry (mirrors the native eng_batch_header).
BATCH_HEADER_DTYPE: Final[np.dtype[np.void]]

class BufferView:
    @property
    def obj(self) -> Any: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def address(self) -> int: ...
    def __init__(self, obj: Buffer) -> None: ...
    def __len__(self) -> int: ...

def scan(data: Buffer | BufferView,
         verify_crc: bool = True) -> tuple[npt.NDArray[np.void], int]: ...
