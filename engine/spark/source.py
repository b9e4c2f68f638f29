"""The `kafka-tiered` PySpark data source: batch reader (with filter pushdown) and stream
reader over the remote tier."""

from __future__ import annotations

import datetime as _dt
import math
import sys
from collections.abc import Iterator
from typing import cast

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from engine.errors import OffsetOutOfRangeError
from engine.scan.planning import pack_ranges, plan_partition, tier_bounds
from engine.scan.schema import arrow_schema, spark_ddl
from engine.scan.tasks import scan_ranges
from engine.scan.tier import Tier, open_tier
from engine.spark.options import EARLIEST, LATEST, ScanOptions, parse_options

__all__ = [
    "KafkaTieredDataSource",
    "KafkaTieredPushdownReader",
    "KafkaTieredReader",
    "KafkaTieredStreamReader",
    "PushedFilters",
    "ScanPartition",
]

LONG_MAX = 2**63 - 1


class ScanPartition(InputPartition):
    """One Spark task: byte ranges of remote segments (picklable SegmentRange list)."""

    def __init__(self, ranges):
        super().__init__(None)
        self.ranges = list(ranges)

    def __repr__(self):
        return f"ScanPartition({len(self.ranges)} ranges, {sum(r.size for r in self.ranges)} bytes)"


class PushedFilters:
    """Offset, partition and topic bounds taken from pushed filters (exact), and a lower
    timestamp bound used only to prune segments and batches (Spark still evaluates it)."""

    def __init__(self):
        self.offset_lo, self.offset_hi = 0, LONG_MAX
        self.partition_lo, self.partition_hi = 0, LONG_MAX
        self.partitions: set[int] | None = None
        self.topics: set[str] | None = None
        self.min_timestamp: int | None = None

    def accept(self, f) -> bool:
        """Records what `f` says; True when the scan then applies it exactly."""
        column = f.attribute
        if len(column) != 1 or not hasattr(f, "value"):
            return False
        name = column[0]
        if name == "offset":
            return self._range(f, "offset")
        if name == "partition":
            if isinstance(f, In) and all(_is_int(v) for v in f.value):
                values = {int(v) for v in f.value}
                self.partitions = values if self.partitions is None else self.partitions & values
                return True
            return self._range(f, "partition")
        if name == "topic":
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                topics = {f.value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                topics = set(f.value)
            else:
                return False
            self.topics = topics if self.topics is None else self.topics & topics
            return True
        if name == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual)):
            ms = _epoch_ms(f.value)
            if ms is not None:
                self.min_timestamp = ms if self.min_timestamp is None else max(
                    self.min_timestamp, ms)
            return False  # pruning only: records of a kept batch still need the filter
        return False

    def _range(self, f, what: str) -> bool:
        lo, hi = getattr(self, f"{what}_lo"), getattr(self, f"{what}_hi")
        if isinstance(f, In):
            if not f.value or not all(_is_int(v) for v in f.value):
                return False
            lo, hi = max(lo, min(f.value)), min(hi, max(f.value) + 1)
            setattr(self, f"{what}_lo", lo)
            setattr(self, f"{what}_hi", hi)
            return False  # only the span is used: Spark keeps the IN
        if not _is_int(f.value):
            return False
        v = int(f.value)
        if isinstance(f, EqualTo):
            lo, hi = max(lo, v), min(hi, v + 1)
        elif isinstance(f, GreaterThan):
            lo = max(lo, v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            lo = max(lo, v)
        elif isinstance(f, LessThan):
            hi = min(hi, v)
        elif isinstance(f, LessThanOrEqual):
            hi = min(hi, v + 1)
        else:
            return False
        setattr(self, f"{what}_lo", lo)
        setattr(self, f"{what}_hi", hi)
        return True

    def keeps(self, topic: str, partition: int) -> bool:
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions)
                and self.partition_lo <= partition < self.partition_hi)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _epoch_ms(value) -> int | None:
    """A lower bound in ms for pruning: one ms below, so float rounding and sub-ms parts
    never prune a batch holding a matching record. PySpark hands timestamps over as naive
    local times (or aware ones); datetime.timestamp() reads both right."""
    if isinstance(value, _dt.datetime):
        return int(value.timestamp() * 1000) - 1
    return None


def plan_scan(opts: ScanOptions, pushed: PushedFilters | None = None) -> list[ScanPartition]:
    """Driver-side planning of a batch query."""
    pushed = pushed or PushedFilters()
    planned = []  # (topic, partition, chain, lo, hi, aborted)
    with open_tier(opts.tier) as tier:
        for topic, partition, tip in tier.select(opts):
            if not pushed.keeps(topic, partition):
                continue
            chain = tier.chain(tip)
            if tier_bounds(chain) is None and not _explicit(opts, topic, partition):
                continue  # nothing tiered yet: an empty partition
            start = resolve_bound(tier, opts.starting, topic, partition, chain, starting=True,
                                  strategy=opts.starting_by_timestamp_strategy)
            end = resolve_bound(tier, opts.ending, topic, partition, chain, starting=False)
            if end < start and opts.ending.timestamp is not None:
                end = start  # an ending timestamp before the start selects nothing
            _check_in_tier(topic, partition, chain, start, end)
            lo, hi = max(start, pushed.offset_lo), min(end, pushed.offset_hi)
            aborted = None
            if opts.read_committed:
                remote_log = tier.remote_log(chain, topic, partition)
                hi = min(hi, remote_log.last_stable_offset(chain))
                aborted = remote_log.all_aborted_transactions(chain)
            if lo >= hi:
                continue
            planned.append((topic, partition, chain, lo, hi, aborted))

        def plan(max_bytes):
            ranges = []
            for topic, partition, chain, lo, hi, aborted in planned:
                ranges += plan_partition(topic, partition, chain, lo, hi, max_bytes,
                                         tier.offset_entries,
                                         min_timestamp=pushed.min_timestamp, aborted=aborted)
            return pack_ranges(ranges, max_bytes)

        tasks = plan(opts.max_bytes_per_partition)
        if opts.min_partitions and len(tasks) < opts.min_partitions:
            total = sum(r.size for t in tasks for r in t)
            tasks = plan(max(1, min(opts.max_bytes_per_partition,
                                    -(-total // opts.min_partitions))))
    return [ScanPartition(t) for t in tasks]


def _explicit(opts: ScanOptions, topic: str, partition: int) -> bool:
    return any(b.offsets.get((topic, partition), -1) >= 0 for b in (opts.starting, opts.ending))


def _check_in_tier(topic, partition, chain, start, end) -> None:
    bounds = tier_bounds(chain)
    if end < start:
        raise OffsetOutOfRangeError(
            f"{topic}-{partition}: the ending offset {end} is before the starting offset "
            f"{start}", offset=end)
    if bounds is None or start < bounds[0] or end > bounds[1]:
        span = "nothing is tiered" if bounds is None else \
            f"the remote tier holds offsets [{bounds[0]}, {bounds[1]})"
        bad = start if bounds is None or start < bounds[0] else end
        raise OffsetOutOfRangeError(
            f"{topic}-{partition}: offsets [{start}, {end}) are outside the remote tier: {span}",
            offset=bad, log_start_offset=None if bounds is None else bounds[0],
            log_end_offset=None if bounds is None else bounds[1])


def resolve_bound(tier: Tier, bound, topic: str, partition: int, chain, *, starting: bool,
                  strategy: str = "error") -> int:
    """An absolute offset for a starting/ending Bound of one partition."""
    bounds = tier_bounds(chain)
    earliest, latest = bounds if bounds is not None else (None, None)
    name = "starting" if starting else "ending"
    ts = bound.timestamp
    if bound.timestamps is not None:
        ts = bound.timestamps.get((topic, partition))
    if ts is not None:
        if bounds is None:
            return _special(bound.default, topic, partition, None, None, name)
        found = tier.remote_log(chain, topic, partition).offset_for_timestamp(ts, chain)
        if found is not None:
            return found[0]
        if starting and strategy == "error":
            raise OffsetOutOfRangeError(
                f"{topic}-{partition}: no tiered record has a timestamp at or after {ts} "
                f"(the remote tier holds offsets [{earliest}, {latest})); set "
                "startingOffsetsByTimestampStrategy=latest to start at the end instead",
                log_start_offset=earliest, log_end_offset=latest)
        return latest
    spec = bound.offsets.get((topic, partition), bound.default)
    return _special(spec, topic, partition, earliest, latest, name)


def _special(spec: int, topic, partition, earliest, latest, name) -> int:
    if spec in (EARLIEST, LATEST):
        if earliest is None:
            raise OffsetOutOfRangeError(
                f"{topic}-{partition}: nothing of this partition is tiered yet, so the "
                f"{name} offset {'earliest' if spec == EARLIEST else 'latest'} has no value")
        return earliest if spec == EARLIEST else latest
    return spec


#: The pyspark worker module that plans a read with filter pushdown (pyspark 4.1 to 4.3).
PUSHDOWN_PLANNER_FILE = "data_source_pushdown_filters.py"


def _called_for_pushdown() -> bool:
    """Whether Spark's pushdown planner asked for this reader.

    No supported way exists (pyspark 4.3.0, as in 4.1): `DataSource.reader(schema)` gets no
    session or conf, and the worker that plans a read without pushdown
    (pyspark/sql/worker/plan_data_source_read.py) refuses, with
    DATA_SOURCE_PUSHDOWN_DISABLED, any reader whose class overrides
    `DataSourceReader.pushFilters` while spark.sql.python.filterPushdown.enabled is off,
    its default. Always returning the pushdown reader would fail every read under the
    default conf; never returning it would lose segment pruning. The flag decides which
    worker calls `reader()` (data_source_pushdown_filters.py only when it is on), so the
    calling frames say it. Should a pyspark release rename that worker, reads get the
    plain reader: the same rows, without pruning (tests/test_spark_source.py checks the
    name against the installed pyspark)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(PUSHDOWN_PLANNER_FILE):
            return True
        frame = frame.f_back
    return False


class KafkaTieredReader(DataSourceReader):
    def __init__(self, opts: ScanOptions):
        self.opts = opts
        self.pushed = PushedFilters()

    def partitions(self):
        return plan_scan(self.opts, self.pushed) or [ScanPartition([])]

    def read(self, partition: InputPartition) -> Iterator:
        # Spark hands back the partitions that `partitions` planned
        return scan_ranges(cast(ScanPartition, partition).ranges, self.opts.broker_properties,
                           arrow_schema(self.opts.include_headers),
                           decode_ahead=self.opts.decode_ahead)


class KafkaTieredPushdownReader(KafkaTieredReader):
    def pushFilters(self, filters):
        for f in filters:
            if not self.pushed.accept(f):
                yield f


def rate_limit(begin: dict, end: dict, max_offsets: int) -> dict:
    """Ends that advance at most `max_offsets` offsets in all, shared in proportion to each
    partition's lag (Spark's Kafka source's maxOffsetsPerTrigger rule)."""
    lag = {k: end[k] - begin[k] for k in end}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(end)
    out = {}
    for k, size in lag.items():
        share = max_offsets * size / total
        out[k] = begin[k] + (math.ceil(share) if share < 1 else math.floor(share))
    return out


class KafkaTieredStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over segments tiered since the last batch. Offsets are JSON objects
    {"topic": {"partition": next offset}}; a batch reads [start, end) of each partition."""

    def __init__(self, opts: ScanOptions):
        self.opts = opts
        self._target: dict | None = None

    def _latest(self) -> dict:
        """{topic: {partition: (earliest, end)}} of the tier now (end: the tier's last
        stable offset with readCommitted)."""
        out: dict = {}
        with open_tier(self.opts.tier) as tier:
            for topic, partition, tip in tier.select(self.opts):
                chain = tier.chain(tip)
                bounds = tier_bounds(chain)
                if bounds is not None:
                    out.setdefault(topic, {})[str(partition)] = (
                        bounds[0],
                        tier.remote_log(chain).last_stable_offset(chain)
                        if self.opts.read_committed
                        else bounds[1])
        return out

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def initialOffset(self) -> dict:
        out: dict = {}
        with open_tier(self.opts.tier) as tier:
            for topic, partition, tip in tier.select(self.opts):
                chain = tier.chain(tip)
                if tier_bounds(chain) is None:
                    continue  # starts at earliest once something is tiered
                out.setdefault(topic, {})[str(partition)] = resolve_bound(
                    tier, self.opts.starting, topic, partition, chain, starting=True,
                    strategy=self.opts.starting_by_timestamp_strategy)
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict, limit=None) -> dict:
        latest = self._latest() if self._target is None else self._target
        begin = {(t, p): start.get(t, {}).get(p, earliest)
                 for t, parts in latest.items() for p, (earliest, _) in parts.items()}
        end = {(t, p): max(hi, begin[(t, p)])
               for t, parts in latest.items() for p, (_, hi) in parts.items()}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        out = {t: dict(ps) for t, ps in start.items()}
        for (t, p), offset in end.items():
            out.setdefault(t, {})[p] = offset
        return out

    def partitions(self, start: dict, end: dict):
        ranges = []
        with open_tier(self.opts.tier) as tier:
            known = tier.partitions()
            for topic, parts in sorted(end.items()):
                for p, hi in sorted(parts.items(), key=lambda kv: int(kv[0])):
                    partition = int(p)
                    tip = known.get((topic, partition))
                    if tip is None:
                        raise OffsetOutOfRangeError(
                            f"{topic}-{partition} is no longer in the remote tier (deleted?) "
                            f"while the stream has offsets up to {hi} to read")
                    chain = tier.chain(tip)
                    bounds = tier_bounds(chain)
                    lo = start.get(topic, {}).get(p)
                    if lo is None:
                        lo = bounds[0] if bounds else hi  # a new partition: from earliest
                    if bounds is not None and lo < bounds[0]:
                        if self.opts.fail_on_data_loss:
                            raise OffsetOutOfRangeError(
                                f"{topic}-{partition}: offsets [{lo}, {bounds[0]}) were "
                                "deleted from the remote tier before this stream read them "
                                "(set failOnDataLoss=false to skip them)", offset=lo,
                                log_start_offset=bounds[0], log_end_offset=bounds[1])
                        lo = bounds[0]
                    if lo >= hi:
                        continue
                    aborted = (tier.remote_log(chain).all_aborted_transactions(chain)
                               if self.opts.read_committed else None)
                    ranges.extend(plan_partition(topic, partition, chain, lo, hi,
                                                 self.opts.max_bytes_per_partition,
                                                 tier.offset_entries, aborted=aborted))
        return [ScanPartition(t) for t in pack_ranges(ranges, self.opts.max_bytes_per_partition)]

    def read(self, partition: InputPartition) -> Iterator:
        # Spark hands back the partitions that `partitions` planned
        return scan_ranges(cast(ScanPartition, partition).ranges, self.opts.broker_properties,
                           arrow_schema(self.opts.include_headers),
                           decode_ahead=self.opts.decode_ahead)

    def commit(self, end: dict) -> None:
        """Nothing to release: the tier is read-only to this source."""


class KafkaTieredDataSource(DataSource):
    """`spark.read.format("kafka-tiered")`: Kafka history straight from the remote tier."""

    @classmethod
    def name(cls) -> str:
        return "kafka-tiered"

    def schema(self):
        # options are checked here so that a bad one fails at load(), on the driver
        return spark_ddl(parse_options(self.options).include_headers)

    def reader(self, schema):
        opts = parse_options(self.options)
        if _called_for_pushdown():
            return KafkaTieredPushdownReader(opts)
        return KafkaTieredReader(opts)

    def streamReader(self, schema):
        return KafkaTieredStreamReader(parse_options(self.options, streaming=True))
