"""Options of the `kafka-tiered` source, named and interpreted as Spark's Kafka source does.

Topic selection: exactly one of `subscribe` (comma list), `subscribePattern` (a regex the
whole topic name must match) or `assign` (JSON `{"topic": [0, 1]}`).

Bounds: `startingOffsets` / `endingOffsets` are "earliest", "latest" or JSON
`{"topic": {"0": 23, "1": -2}}` (-2 earliest, -1 latest; partitions left out take the
default); `startingTimestamp` / `endingTimestamp` (ms, every partition) and
`startingOffsetsByTimestamp` / `endingOffsetsByTimestamp` (JSON of ms per partition) take
precedence, in that order, as in Spark. Starting bounds are inclusive, ending ones exclusive.

Engine options: `config` (the engine's properties file) and/or broker properties given
directly as options (any name with a dot: `log.dirs`, `rsm.config.dirs`, ...; they override
the file), `maxBytesPerPartition` (bytes of remote log per Spark task), `readCommitted`
(leave out records of aborted transactions, found through the remote transaction indexes),
`decodeAhead` (default true: a task decodes its next Arrow batch on a helper thread while
Spark sends the current one). `minPartitions` (Spark's name) asks for at least that many
tasks: the byte target per task shrinks to total / minPartitions. Streams take
`maxOffsetsPerTrigger` (Spark's rule: shared between partitions by lag).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.config import ConfigError
from engine.scan.tier_options import TierOptions, option_bool, parse_tier_options

__all__ = ["DEFAULT_MAX_BYTES_PER_PARTITION", "EARLIEST", "LATEST", "ScanOptions", "parse_options"]

EARLIEST = -2
LATEST = -1
#: Tuned with bench/compare_spark.py: large enough that per-task overhead (a Python worker
#: round trip, one range read) is small, small enough that a few segments give every core work.
DEFAULT_MAX_BYTES_PER_PARTITION = 64 << 20

@dataclass(frozen=True)
class Bound:
    """A starting or ending bound: `default` (EARLIEST/LATEST) for partitions not named,
    `offsets` {(topic, partition): offset or EARLIEST/LATEST}, or timestamps (ms):
    `timestamp` for every partition or `timestamps` per partition."""

    default: int
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[tuple[str, int], int] | None = None


@dataclass(frozen=True)
class ScanOptions:
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[tuple[str, int], ...] | None
    starting: Bound
    ending: Bound
    include_headers: bool
    read_committed: bool
    max_bytes_per_partition: int
    #: where the scan reads: the broker properties, or a bucket with its remote-log metadata
    #: files and failOnDataLoss
    tier: TierOptions
    starting_by_timestamp_strategy: str = "error"
    decode_ahead: bool = True
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None

    @property
    def broker_properties(self) -> Mapping[str, str]:
        return self.tier.broker_properties

    @property
    def bucket(self) -> str | None:
        return self.tier.bucket

    @property
    def remote_log_metadata(self) -> str | None:
        return self.tier.remote_log_metadata

    @property
    def fail_on_data_loss(self) -> bool:
        return self.tier.fail_on_data_loss

    def selects(self, topic: str) -> bool:
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)

    def selects_partition(self, topic: str, partition: int) -> bool:
        if self.assign is not None:
            return (topic, partition) in self.assign
        return self.selects(topic)


def _json(name: str, raw: str):
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(name, raw, f"is not valid JSON ({exc.msg} at position {exc.pos})") \
            from None


def _per_partition(name: str, raw: str, allowed_special: tuple[int, ...]
                   ) -> dict[tuple[str, int], int]:
    """{"topic": {"0": n}} -> {(topic, 0): n}."""
    doc = _json(name, raw)
    if not isinstance(doc, dict):
        raise ConfigError(name, raw, 'must be a JSON object like {"topic":{"0":23}}')
    out = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise ConfigError(name, raw, f"topic {topic!r} must map to an object of "
                                         "partition -> value")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise ConfigError(name, raw, f"partition {p!r} of topic {topic!r} is not an "
                                             "integer") from None
            if isinstance(value, bool) or not isinstance(value, int) or (
                    value < 0 and value not in allowed_special):
                raise ConfigError(name, raw, f"value {value!r} for {topic}-{partition} must be "
                                             "a non-negative integer" +
                                  (" or " + " / ".join(map(str, allowed_special))
                                   if allowed_special else ""))
            out[(topic, partition)] = value
    return out


def _timestamp(name: str, raw: str) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(name, raw, "must be a timestamp in milliseconds") from None
    if value < 0:
        raise ConfigError(name, raw, "must be a non-negative timestamp in milliseconds")
    return value


def _bound(options: Mapping[str, str], prefix: str, default: int, streaming: bool) -> Bound:
    ts = options.get(f"{prefix}timestamp")
    if ts is not None:
        return Bound(default, timestamp=_timestamp(f"{prefix}Timestamp", ts))
    by_ts = options.get(f"{prefix}offsetsbytimestamp")
    if by_ts is not None:
        return Bound(default, timestamps=_per_partition(f"{prefix}OffsetsByTimestamp", by_ts, ()))
    name = f"{prefix}Offsets"
    raw = options.get(name.lower())
    if raw is None:
        return Bound(default)
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        spec = EARLIEST if text.lower() == "earliest" else LATEST
        _check_batch_bound(name, raw, spec, prefix, streaming)
        return Bound(spec)
    offsets = _per_partition(name, text, (EARLIEST, LATEST))
    for value in offsets.values():
        _check_batch_bound(name, raw, value, prefix, streaming)
    return Bound(default, offsets=offsets)


def _check_batch_bound(name, raw, spec, prefix, streaming) -> None:
    # Spark's rules for batch queries: a batch cannot start at latest nor end at earliest.
    if prefix == "starting" and spec == LATEST and not streaming:
        raise ConfigError(name, raw, "latest is not allowed as a starting offset of a batch "
                                     "query")
    if prefix == "ending" and spec == EARLIEST:
        raise ConfigError(name, raw, "earliest is not allowed as an ending offset")


def _positive_int(opts: Mapping[str, str], name: str, default=None) -> int | None:
    """Option `name` (looked up lower-cased, as Spark passes option keys) as an int >= 1,
    or `default` when absent."""
    raw = opts.get(name.lower(), default)
    if raw is None:
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(name, raw, "must be an integer") from None
    if value < 1:
        raise ConfigError(name, raw, "must be at least 1")
    return value


def _topics(opts: dict) -> tuple[tuple[str, ...] | None, str | None,
                                 tuple[tuple[str, int], ...] | None]:
    """(subscribe, subscribePattern, assign) from exactly one of those options, the other
    two None."""
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(chosen) != 1:
        raise ConfigError("subscribe", None if not chosen else ", ".join(chosen),
                          "exactly one of the options subscribe, subscribePattern or assign "
                          "must be given")
    subscribe = pattern = assign = None
    if chosen[0] == "subscribe":
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise ConfigError("subscribe", opts["subscribe"], "names no topic")
    elif chosen[0] == "subscribepattern":
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError("subscribePattern", pattern, f"is not a valid regex: {exc}") \
                from None
    else:
        doc = _json("assign", opts["assign"])
        if not isinstance(doc, dict) or not all(
                isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool)
                                            and p >= 0 for p in v) for v in doc.values()):
            raise ConfigError("assign", opts["assign"],
                              'must be a JSON object like {"topicA":[0,1],"topicB":[2,4]}')
        assign = tuple(sorted((t, p) for t, ps in doc.items() for p in ps))
        if not assign:
            raise ConfigError("assign", opts["assign"], "names no partition")
    return subscribe, pattern, assign


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> ScanOptions:
    """Validated options. Names are case-insensitive (Spark lower-cases them). Raises
    ConfigError naming the option and what is wrong."""
    opts = {str(k).lower(): v for k, v in options.items()}
    subscribe, pattern, assign = _topics(opts)

    max_bytes = _positive_int(opts, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION)
    min_partitions = _positive_int(opts, "minPartitions")
    max_offsets = _positive_int(opts, "maxOffsetsPerTrigger")

    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).lower()
    if strategy not in ("error", "latest"):
        raise ConfigError("startingOffsetsByTimestampStrategy", strategy,
                          "must be error or latest")

    tier = parse_tier_options(opts)
    return ScanOptions(
        subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=_bound(opts, "starting", LATEST if streaming else EARLIEST, streaming),
        ending=_bound(opts, "ending", LATEST, streaming),
        include_headers=option_bool(opts, "includeHeaders", False),
        read_committed=option_bool(opts, "readCommitted", False),
        max_bytes_per_partition=max_bytes,
        tier=tier,
        starting_by_timestamp_strategy=strategy,
        decode_ahead=option_bool(opts, "decodeAhead", True),
        min_partitions=min_partitions,
        max_offsets_per_trigger=max_offsets,
    )
