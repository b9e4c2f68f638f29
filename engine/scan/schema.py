"""The row shape of Spark's Kafka source, as a Spark DDL string and as an Arrow schema.

Spark checks every Arrow batch a Python source yields against the declared schema: names,
types (binary, not large_binary; timestamp[us, tz=UTC]) and nullability must match exactly,
so both forms are built here from one list.
"""

from __future__ import annotations

__all__ = ["COLUMNS", "arrow_schema", "spark_ddl"]

#: (name, Spark SQL type) in the order of Spark's Kafka source; every field is nullable there.
COLUMNS = (
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
)
HEADERS_COLUMN = ("headers", "array<struct<key:string,value:binary>>")


def spark_ddl(include_headers: bool) -> str:
    cols = COLUMNS + ((HEADERS_COLUMN,) if include_headers else ())
    return ", ".join(f"`{name}` {type_}" for name, type_ in cols)


def arrow_schema(include_headers: bool, views: bool = False):
    """Spark's Kafka schema in Arrow; with `views`, keys, values and headers as the view
    types (binary_view, string_view) of decode_columns(views=True)."""
    import pyarrow as pa

    binary = pa.binary_view() if views else pa.binary()
    fields = [
        pa.field("key", binary),
        pa.field("value", binary),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_LIST_TYPE(views)))
    return pa.schema(fields)


def HEADER_LIST_TYPE(views: bool = False):
    import pyarrow as pa

    if views:
        return pa.list_(pa.struct([pa.field("key", pa.string_view()),
                                   pa.field("value", pa.binary_view())]))
    return pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
