"""`read_topic`: a tiered topic as a stream of Arrow record batches.

Sources:
- `config` (a broker properties file, or its properties as a mapping): the remote tier the
  broker writes, its segments listed by the engine's RLMM (read-only, as the Spark source
  lists them) and read through the configured RSM;
- `bucket` (`s3://bucket/prefix`): the object-store tier's objects alone
  (`engine.remote.bucket`), with the store's settings in `store` (the plugin's names without
  `rsm.config.`) and/or the `rsm.config.*` keys of `config`; never a broker's RLMM. With
  `remote_log_metadata` (directories, engine.remote.metadata_files: Kafka's
  `__remote_log_metadata` partitions or the embedded RLMM's files) only the segments that
  metadata lists COPY_SEGMENT_FINISHED at or above the log start offset are read.

Planning is the Spark source's (`engine.scan.planning`): per partition, the segments of the
latest leader-epoch lineage within the offset bounds, cut into byte ranges of whole batches
with the remote offset indexes. Each range is read as a Spark task reads it
(`engine.scan.tasks.read_bytes`) and decoded as a Spark task decodes it
(`engine.scan.decode.scan_range`): its batches' offsets checked against the segment and
their CRCs as they decode, the records Arrow batches of Spark's Kafka schema
(`engine.scan.schema.arrow_schema`), building only the columns asked for: the bytes of keys,
values and headers not asked for are never copied (the CRC check, which covers every byte
of a batch, is what still reads them).

With `views`, keys, values and headers come as Arrow view types (binary_view, string_view)
pointing into the bytes read (uncompressed batches) or each batch's decompressed section:
no record byte is copied. pyarrow, Polars and DuckDB take them; the arrays keep what they
point into alive (a read buffer, or a mapping of the tier's immutable files).

Records are those a consumer of `isolation_level` sees (Kafka's isolation.level, Spark's
`kafka.isolation.level`): "read_uncommitted" (the default) every data record;
"read_committed" no record of an aborted transaction (found through the remote transaction
indexes, those batches are never decoded) and nothing from the tier's last stable offset on
(a transaction whose marker is not tiered yet). Control records never appear.

Bounds: `starting_offsets` / `ending_offsets` (exclusive): None (earliest / latest of the
tier), one offset for every partition, or a mapping partition -> offset;
`start_timestamp` / `end_timestamp` (ms, end exclusive) keep the records whose timestamp is
in range (segments and batches whose max timestamp is below the start are not read).
Offsets missing from a bucket inside the bounds follow Spark's `failOnDataLoss`
(`fail_on_data_loss`, default True: RemoteDataLossError naming the partition and offsets;
False: the records that exist, with a warning); so does a starting offset below the tier's
earliest (its records are gone).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from engine.config import ConfigError, load_properties
from engine.remote.bucket import Bucket, RemoteDataLossError
from engine.remote.remote_log import ChainSegments, RemoteLog, StoreIndexes
from engine.scan.decode import scan_range
from engine.scan.planning import SegmentRange, plan_partition
from engine.scan.schema import arrow_schema
from engine.scan.tasks import read_bytes
from engine.scan.tier import Tier

__all__ = ["TopicStream", "read_topic", "record_batch_reader"]

#: bytes of one planned range (one read of a segment)
RANGE_BYTES = 64 << 20
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def read_topic(topic: str, *, config: str | Path | Mapping[str, str] | None = None,
               bucket: str | None = None, store: Mapping[str, str] | None = None,
               partitions: Iterable[int] | None = None,
               starting_offsets: int | Mapping[int, int] | None = None,
               ending_offsets: int | Mapping[int, int] | None = None,
               start_timestamp: int | None = None, end_timestamp: int | None = None,
               columns: Iterable[str] | None = None, include_headers: bool = False,
               fail_on_data_loss: bool = True,
               isolation_level: str = "read_uncommitted",
               remote_log_metadata: str | Path | Iterable | None = None,
               views: bool = False) -> TopicStream:
    """The topic's tiered records (see the module docstring). Plans at once (bad bounds and
    lost data fail here); the records are read as the stream is consumed."""
    return TopicStream(topic, config=config, bucket=bucket, store=store,
                       partitions=partitions, starting_offsets=starting_offsets,
                       ending_offsets=ending_offsets, start_timestamp=start_timestamp,
                       end_timestamp=end_timestamp, columns=columns,
                       include_headers=include_headers, fail_on_data_loss=fail_on_data_loss,
                       isolation_level=isolation_level,
                       remote_log_metadata=remote_log_metadata, views=views)


def record_batch_reader(topic: str, **options):
    """`read_topic(topic, **options).to_reader()`: a pyarrow.RecordBatchReader."""
    return read_topic(topic, **options).to_reader()


class _TierSource:
    """The broker's remote tier: RLMM lineage, configured RSM."""

    def __init__(self, props: Mapping[str, str]):
        self.tier = Tier(props)
        self.rsm = self.tier.rsm

    def partitions(self, topic):
        return {p: tip for (t, p), tip in self.tier.partitions().items() if t == topic}

    def chain(self, tip, start, end, fail_on_data_loss):
        return self.tier.chain(tip)

    def resolve(self, tips):
        self.tier.resolve(tips)

    def offset_entries(self, segment):
        return self.tier.offset_entries(segment)

    def remote_log(self, chain):
        return self.tier.remote_log(chain)

    def close(self):
        self.tier.close()


class _BucketSource:
    """A bucket alone (engine.remote.bucket)."""

    def __init__(self, url: str, store, props, remote_log_metadata=None):
        from engine.remote.metadata_files import RemoteLogMetadataFiles

        metadata = (None if remote_log_metadata is None else
                    RemoteLogMetadataFiles(remote_log_metadata, key="remote_log_metadata"))
        self.bucket = Bucket(url, store, props, metadata=metadata)
        self.rsm = self.bucket.rsm
        self.indexes = StoreIndexes(self.rsm)

    def partitions(self, topic):
        return {p: tip for (t, p), tip in self.bucket.partitions(topic).items()}

    def view(self, tip):
        return self.bucket.partition(tip)

    def resolve(self, tips):
        self.bucket.resolve(tips)

    def chain(self, tip, start, end, fail_on_data_loss):
        view = self.bucket.partition(tip)
        view.check_range(start, end, fail_on_data_loss)
        return view.chain

    def offset_entries(self, segment):
        return self.indexes.offset_entries(segment)

    def remote_log(self, chain):
        return RemoteLog(self.rsm, ChainSegments("", chain, f"the bucket {self.bucket.url}"),
                         self.indexes)

    def close(self):
        self.bucket.close()


def _props(config) -> dict[str, str] | None:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return {str(k): str(v) for k, v in config.items()}
    try:
        return load_properties(str(config))
    except FileNotFoundError:
        raise ConfigError("config", str(config), "file not found") from None
    except OSError as exc:
        raise ConfigError("config", str(config),
                          f"cannot be read: [Errno {exc.errno}] {exc.strerror}") from None


def _per_partition(value, p: int, name: str):
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, Mapping):
        return value.get(p)
    raise ConfigError(name, value, "expected an offset or a mapping partition -> offset")


class TopicStream:
    """A planned read of a topic (see `read_topic`). `to_reader()` gives a
    pyarrow.RecordBatchReader; `__arrow_c_stream__` hands the same stream to any consumer of
    the Arrow PyCapsule interface (DuckDB, Polars, pyarrow). Each of them reads the plan
    from the start. `close()` (or the end of a `with` block) releases the store."""

    def __init__(self, topic: str, *, config, bucket, store, partitions, starting_offsets,
                 ending_offsets, start_timestamp, end_timestamp, columns, include_headers,
                 fail_on_data_loss, isolation_level="read_uncommitted",
                 remote_log_metadata=None, views=False):
        import pyarrow as pa

        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError("isolation_level", isolation_level,
                              f"one of {', '.join(ISOLATION_LEVELS)}")
        self.read_committed = isolation_level == "read_committed"

        full = arrow_schema(True, views)
        names = list(columns) if columns is not None else [
            f.name for f in full if include_headers or f.name != "headers"]
        unknown = [n for n in names if n not in full.names]
        if unknown or not names or len(set(names)) != len(names):
            raise ConfigError("columns", ",".join(map(str, names)),
                              f"a non-empty selection of {', '.join(full.names)}, each once")
        self.schema = pa.schema([full.field(n) for n in names])  # in the order asked
        self.columns = tuple(names)
        # record bytes of columns not asked for are not copied (views copy none)
        wanted = any(n in names for n in ("key", "value", "headers"))
        self._decoded = {"views": True} if views and wanted else {
            "with_keys": "key" in names, "with_values": "value" in names,
            "with_headers": "headers" in names}
        self.topic = topic
        self.start_timestamp, self.end_timestamp = start_timestamp, end_timestamp
        props = _props(config)
        source: _BucketSource | _TierSource
        if bucket is not None:
            source = _BucketSource(bucket, store, props, remote_log_metadata)
        elif props is not None:
            if store:
                raise ConfigError("store", ",".join(store), "store settings name a bucket's "
                                                            "store: give `bucket` too")
            if remote_log_metadata is not None:
                raise ConfigError("remote_log_metadata", str(remote_log_metadata),
                                  "only with `bucket` (a broker's tier reads its RLMM)")
            source = _TierSource(props)
        else:
            raise ConfigError("config", None, "give a broker config or a bucket")
        self._source = source
        self._finalizer = weakref.finalize(self, source.close)
        try:
            self.ranges = self._plan(source, partitions, starting_offsets, ending_offsets,
                                     fail_on_data_loss)
        except BaseException:
            self.close()
            raise

    def _plan(self, source, partitions, starting, ending, fail_on_data_loss
              ) -> list[SegmentRange]:
        known = source.partitions(self.topic)
        if not known:
            raise ConfigError("topic", self.topic, "the remote tier holds no such topic")
        wanted = sorted(known) if partitions is None else sorted(set(partitions))
        missing = [p for p in wanted if p not in known]
        if missing:
            raise ConfigError("partitions", ",".join(map(str, missing)),
                              f"not in the remote tier, which holds partitions "
                              f"{', '.join(map(str, sorted(known)))} of {self.topic}")
        source.resolve(known[p] for p in wanted)
        out: list[SegmentRange] = []
        for p in wanted:
            tip = known[p]
            start = _per_partition(starting, p, "starting_offsets")
            end = _per_partition(ending, p, "ending_offsets")
            first = source.chain(tip, 0, 0, fail_on_data_loss)
            if not first:
                continue
            earliest, latest = first[0].start_offset, first[-1].end
            start = earliest if start is None else start
            end = latest if end is None else end
            if start < earliest:
                lost = RemoteDataLossError(
                    f"{self.topic}-{p}: offsets {start}-{earliest - 1} are gone from the remote "
                    f"tier, which begins at offset {earliest}" +
                    ("; set failOnDataLoss=false to read from there" if fail_on_data_loss
                     else ""), partition=f"{self.topic}-{p}", missing=[(start, earliest - 1)],
                    offset=start)
                if fail_on_data_loss:
                    raise lost
                start = min(earliest, max(start, end))
            aborted = None
            if self.read_committed:  # the whole lineage: markers may lie past `end`
                # from the LSO on, a read_committed consumer gets nothing yet
                remote_log = source.remote_log(first)
                end = min(end, max(start, remote_log.last_stable_offset(first)))
                aborted = remote_log.all_aborted_transactions(first)
            chain = source.chain(tip, start, end, fail_on_data_loss)
            out += plan_partition(self.topic, p, chain, start, end, RANGE_BYTES,
                                  source.offset_entries, min_timestamp=self.start_timestamp,
                                  aborted=aborted)
        return out

    # -- the stream -------------------------------------------------------------------

    def batches(self) -> Iterator:
        for r in self.ranges:
            yield from self._range_batches(r)

    def to_reader(self):
        import pyarrow as pa

        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def __arrow_c_stream__(self, requested_schema=None):
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def read_all(self):
        return self.to_reader().read_all()

    def close(self) -> None:
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"TopicStream({self.topic!r}, {len(self.ranges)} ranges, "
                f"{sum(r.size for r in self.ranges)} bytes, columns={list(self.columns)})")

    def _range_batches(self, r: SegmentRange) -> Iterator:
        yield from scan_range(read_bytes(self._source.rsm, r), r, self.schema,
                              decode=self._decoded,
                              timestamps=(self.start_timestamp, self.end_timestamp))
