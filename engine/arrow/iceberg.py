"""The export job's Apache Iceberg target: a topic's tiered history appended to an Iceberg
table (pyiceberg, a SQL catalog), resumable without duplicates, with no Spark.

Rounds are the Parquet export's (`engine.scan.export.plan_round`: whole segments from each
partition's next offset, about `max_bytes_per_round` remote bytes). A round's records are
read with `engine.arrow.read_topic` and appended in one Iceberg commit whose snapshot summary
also holds the export's state: the topic, the round number and every partition's next
offset. The data files and the offsets they hold become visible together, or neither does:
a crash before the catalog's commit leaves only data files no snapshot references (orphans,
for the usual Iceberg orphan-file maintenance), and the next run starts again from the
offsets of the last export snapshot among the current snapshot's ancestors (a rollback of
the table rolls the export back with it). A concurrent writer makes the commit fail
(pyiceberg checks that the branch still points at the snapshot the round started from): the
round is not committed and a rerun continues.

The table's schema is Spark's Kafka source's (`engine.scan.schema`), headers included when
asked; it is partitioned by Kafka partition and by day of the record timestamp, as the
Parquet export's `partition=P/date=D` directories. A round is held in memory as one Arrow
table before it is written (pyiceberg writes partitioned tables from whole tables only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from engine.config import ConfigError
from engine.errors import KafkaEngineError
from engine.scan.export import ExportState, next_round
from engine.scan.schema import COLUMNS

__all__ = ["DEFAULT_MAX_BYTES_PER_ROUND", "SUMMARY_OFFSETS", "SUMMARY_ROUND", "SUMMARY_TOPIC",
           "IcebergTarget", "committed_state", "export_to_iceberg", "table_schema"]

#: remote bytes per round: a round is one in-memory Arrow table
DEFAULT_MAX_BYTES_PER_ROUND = 256 << 20
#: snapshot summary keys of an export round's commit
SUMMARY_TOPIC = "kafka-tiered.topic"
SUMMARY_ROUND = "kafka-tiered.round"
SUMMARY_OFFSETS = "kafka-tiered.next-offsets"  # JSON {"partition": next offset}
#: the catalog's name in pyiceberg (a label: the SQL catalog's tables are keyed by it)
CATALOG_NAME = "kafka-tiered"


@dataclass(frozen=True)
class IcebergTarget:
    """A table of a SQL catalog: `catalog_uri` (SQLAlchemy, e.g. sqlite:////path/cat.db),
    `warehouse` (where new tables put their files), `table` ("namespace.name"), and further
    catalog `properties` (pyiceberg's names: s3.endpoint, ...)."""

    catalog_uri: str
    warehouse: str | None
    table: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def identifier(self) -> tuple[str, str]:
        namespace, _, name = self.table.rpartition(".")
        if not namespace or not name:
            raise ConfigError("--iceberg-table", self.table, "expected NAMESPACE.TABLE")
        return namespace, name

    def catalog(self):
        from pyiceberg.catalog.sql import SqlCatalog
        from sqlalchemy.exc import SQLAlchemyError

        props = {**self.properties, "uri": self.catalog_uri}
        if self.warehouse:
            props["warehouse"] = self.warehouse
        try:  # connects, and creates the catalog's tables in a new database
            return SqlCatalog(CATALOG_NAME, **props)
        except SQLAlchemyError as exc:
            cause = getattr(exc, "orig", None) or exc
            raise ConfigError("--iceberg-catalog-uri", self.catalog_uri,
                              f"cannot be opened ({type(cause).__name__}: "
                              f"{str(cause).splitlines()[0]})") from None


def table_schema(include_headers: bool):
    """Spark's Kafka schema as an Iceberg schema (every field optional, as in Spark)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    types = {"binary": BinaryType, "string": StringType, "int": IntegerType,
             "bigint": LongType, "timestamp": TimestamptzType}
    fields = [NestedField(i, name, types[spark_type](), required=False)
              for i, (name, spark_type) in enumerate(COLUMNS, 1)]
    if include_headers:
        n = len(fields)
        header = StructType(NestedField(n + 3, "key", StringType(), required=False),
                            NestedField(n + 4, "value", BinaryType(), required=False))
        fields.append(NestedField(n + 1, "headers", ListType(n + 2, header,
                                                              element_required=False),
                                  required=False))
    return Schema(*fields)


def _partition_spec(schema):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, IdentityTransform

    return PartitionSpec(
        PartitionField(schema.find_field("partition").field_id, 1000, IdentityTransform(),
                       "partition"),
        PartitionField(schema.find_field("timestamp").field_id, 1001, DayTransform(),
                       "timestamp_day"))


def _open_table(target: IcebergTarget, include_headers: bool):
    """The target table, created (with its namespace) when missing; an existing table must
    have the columns this export writes."""
    from pyiceberg.exceptions import NoSuchTableError

    catalog = target.catalog()
    namespace, name = target.identifier()
    try:
        table = catalog.load_table((namespace, name))
    except NoSuchTableError:
        if not target.warehouse:
            raise ConfigError("--iceberg-warehouse", None, f"required to create table "
                                                           f"{target.table}") from None
        catalog.create_namespace_if_not_exists(namespace)
        schema = table_schema(include_headers)
        return catalog.create_table_if_not_exists((namespace, name), schema,
                                                  partition_spec=_partition_spec(schema))
    want = [f.name for f in table_schema(include_headers).fields]
    have = [f.name for f in table.schema().fields]
    if have != want:
        raise ConfigError("--iceberg-table", target.table,
                          f"has columns {have}, this export writes {want} "
                          "(--include-headers must match the table's first export)")
    return table


def committed_state(table, topic: str) -> ExportState:
    """The export state of the last export snapshot among the current snapshot's ancestors
    (a fresh state when the table holds none)."""
    from pyiceberg.table.snapshots import ancestors_of

    last = None
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        last = snapshot
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if SUMMARY_OFFSETS not in summary:
            continue
        if summary.get(SUMMARY_TOPIC) != topic:
            raise ConfigError("--topic", topic, f"table {table.name()} holds an export of "
                                                f"topic {summary.get(SUMMARY_TOPIC)!r}; "
                                                "use another table")
        try:
            offsets = {int(p): int(o) for p, o in json.loads(summary[SUMMARY_OFFSETS]).items()}
            return ExportState(topic, int(summary[SUMMARY_ROUND]), offsets)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError("--iceberg-table", ".".join(table.name()),
                              f"snapshot {snapshot.snapshot_id} holds an unreadable export "
                              f"state ({exc})") from None
    if last is not None and last.parent_snapshot_id is not None:
        # the export's snapshots were expired: what the table holds cannot be told
        raise ConfigError("--iceberg-table", ".".join(table.name()),
                          f"the ancestors of snapshot {table.current_snapshot().snapshot_id} "
                          "end at an expired snapshot before any export snapshot: the "
                          "exported offsets are unknown")
    return ExportState(topic)


def _summary(state: ExportState) -> dict[str, str]:
    return {SUMMARY_TOPIC: state.topic, SUMMARY_ROUND: str(state.round),
            SUMMARY_OFFSETS: json.dumps({str(p): o for p, o in sorted(state.offsets.items())})}


def export_to_iceberg(props: Mapping[str, str], config_path: str | None, topic: str,
                      target: IcebergTarget, *,
                      max_bytes_per_round: int = DEFAULT_MAX_BYTES_PER_ROUND,
                      include_headers: bool = False, log: Callable[[str], None] = print,
                      bucket: str | None = None, store: Mapping[str, str] | None = None
                      ) -> ExportState:
    """Exports every tiered record of `topic` not in the table yet (from the bucket alone
    when `bucket` is given). Returns the final state."""
    table = _open_table(target, include_headers)
    state = committed_state(table, topic)
    while True:
        plan = next_round(props, config_path, topic, bucket, store, state.offsets,
                          max_bytes_per_round)
        if not plan:
            return state
        rows = _read_round(props, topic, plan, include_headers, bucket, store)
        done = ExportState(topic, state.round + 1,
                           {**state.offsets, **{p: e for p, (_, e) in plan.items()}})
        _commit(table, rows, done)
        state = done
        log(f"round {state.round}: " + ", ".join(f"{topic}-{p} [{s}, {e})"
                                                for p, (s, e) in sorted(plan.items())) +
            f" -> {rows.num_rows} rows, snapshot {table.current_snapshot().snapshot_id}")


def _read_round(props, topic, plan, include_headers, bucket, store):
    from engine.arrow.reader import read_topic

    # the bucket's remote-log metadata rides with the store settings (as for the Spark
    # scan); the Arrow reader takes it as its own argument
    store = dict(store or {})
    metadata = store.pop("remoteLogMetadataPath", None)
    with read_topic(topic, config=props or None, bucket=bucket, store=store,
                    remote_log_metadata=metadata, partitions=sorted(plan),
                    starting_offsets={p: s for p, (s, _) in plan.items()},
                    ending_offsets={p: e for p, (_, e) in plan.items()},
                    include_headers=include_headers) as stream:
        return stream.read_all()


def _commit(table, rows, state: ExportState) -> None:
    """One commit: the round's data files and the state in its snapshot summary."""
    from pyiceberg.exceptions import CommitFailedException

    try:
        table.append(rows, snapshot_properties=_summary(state))
    except CommitFailedException as exc:
        raise KafkaEngineError(f"table {'.'.join(table.name())}: round {state.round} was not "
                               f"committed ({exc}); another writer changed the table, rerun "
                               "to continue") from None
