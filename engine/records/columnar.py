"""Column buffers of decoded records, wrapped by pyarrow without a copy."""

from __future__ import annotations

import numpy as np

__all__ = ["RecordColumns"]


def _pyarrow():
    try:
        import pyarrow
    except ImportError as exc:  # optional extra
        raise ImportError("to_arrow() needs pyarrow: "
                          "pip install 'kafka-tier-engine[arrow]'") from exc
    return pyarrow


class RecordColumns:
    """Records of a range of batches, column by column (Arrow's memory layout).

    Attributes are numpy arrays: `offset`, `timestamp` (ms), `timestamp_type` (int8, -1/0/1),
    `batch_index` (row of `headers`, the scan of the source buffer, per record), then for
    key, value and header lists the offsets/data/validity triples of Arrow binary arrays.
    """

    def __init__(self, columns: dict, headers: np.ndarray):
        self._c = columns
        self.headers = headers
        self.num_records = columns["num_records"]
        self.offset = columns["offset"]
        self.timestamp = columns["timestamp"]
        self.timestamp_type = columns["timestamp_type"]
        self.batch_index = columns["batch_index"]

    def __len__(self) -> int:
        return self.num_records

    def __getitem__(self, name: str):
        return self._c[name]

    @property
    def views(self) -> bool:
        """True when keys and values are Arrow binary views (decode_columns(views=True))."""
        return "key_views" in self._c

    def _binary(self, name: str, pa_type=None):
        pa = _pyarrow()
        c = self._c
        n = self.num_records if not name.startswith("header_") else c["num_headers"]
        if f"{name}_views" in c:
            nulls = c[f"{name}_null_count"]
            buffers = [pa.py_buffer(c[f"{name}_validity"]) if nulls else None,
                       pa.py_buffer(c[f"{name}_views"])]
            buffers += [pa.py_buffer(b) for b in c["buffers"]]
            view_type = pa.string_view() if pa_type == pa.string() else pa.binary_view()
            return pa.Array.from_buffers(view_type, n, buffers, null_count=nulls)
        if f"{name}_offsets" not in c:
            column = "headers" if name.startswith("header_") else f"{name}s"
            raise ValueError(f"{column} were not decoded (decode_columns(with_{column}=False))")
        validity = c.get(f"{name}_validity")
        nulls = c.get(f"{name}_null_count", 0)
        buffers = [pa.py_buffer(validity) if nulls else None,
                   pa.py_buffer(c[f"{name}_offsets"]), pa.py_buffer(c[f"{name}_data"])]
        return pa.Array.from_buffers(pa_type or pa.binary(), n, buffers, null_count=nulls)

    def keys(self):
        """Keys as a pyarrow BinaryArray, or BinaryViewArray with views (zero-copy)."""
        return self._binary("key")

    def values(self):
        return self._binary("value")

    def header_lists(self):
        """Headers as list<struct<key: string, value: binary>> (zero-copy); with views,
        list<struct<key: string_view, value: binary_view>>."""
        pa = _pyarrow()
        c = self._c
        keys = self._binary("header_key", pa.string())
        values = self._binary("header_value")
        entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
        return pa.ListArray.from_arrays(pa.array(c["header_offsets"], pa.int32()), entries)

    def to_arrow(self):
        """A pyarrow RecordBatch: offset, timestamp (ms), timestampType, key, value, headers."""
        pa = _pyarrow()
        return pa.RecordBatch.from_arrays(
            [pa.array(self.offset), pa.array(self.timestamp),
             pa.array(self.timestamp_type.astype(np.int32)), self.keys(), self.values(),
             self.header_lists()],
            names=["offset", "timestamp", "timestampType", "key", "value", "headers"])

    def to_pylist(self) -> list[dict]:
        """Rows as dicts (for tests and small data; slow by design)."""
        keys, values = self.keys().to_pylist(), self.values().to_pylist()
        headers = self.header_lists().to_pylist()
        return [dict(offset=int(o), timestamp=int(t), timestamp_type=int(tt), key=k, value=v,
                     headers=[(h["key"], h["value"]) for h in hs])
                for o, t, tt, k, v, hs in zip(self.offset, self.timestamp, self.timestamp_type,
                                              keys, values, headers)]
