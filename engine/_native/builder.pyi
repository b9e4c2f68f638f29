from collections.abc import Sequence
from typing import TypeAlias

_Bytes: TypeAlias = bytes | bytearray | memoryview | str
_Header: TypeAlias = tuple[_Bytes, _Bytes | None]

def build_v2_batch(records: list[tuple[int, int, _Bytes | None, _Bytes | None,
                                       Sequence[_Header] | None]],
                   base_offset: int = 0, compression: int = 0, level: int = -1,
                   timestamp_type: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                   base_sequence: int = -1, is_transactional: bool = False,
                   is_control: bool = False, partition_leader_epoch: int = -1,
                   log_append_time: int = -1, delete_horizon_ms: int = -1) -> bytes: ...
