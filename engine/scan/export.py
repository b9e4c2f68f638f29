"""Export rounds, shared by the Parquet export (engine.spark.export) and the Iceberg one
(engine.arrow.iceberg): an export's state (the last round, the next offset of every
partition) and the plan of its next round, whole segments of about `max_bytes` remote bytes
from each partition's next offset."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import ConfigError
from engine.errors import OffsetOutOfRangeError
from engine.scan.planning import ChainLink, tier_bounds
from engine.scan.tier import UnknownTopicError, tier_for_export

__all__ = ["ExportState", "next_round", "plan_round"]


@dataclass
class ExportState:
    topic: str
    round: int = 0
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset

    def to_json(self) -> bytes:
        return json.dumps({"topic": self.topic, "round": self.round,
                           "offsets": {str(p): o for p, o in sorted(self.offsets.items())}},
                          indent=1).encode() + b"\n"

    @classmethod
    def load(cls, path: Path, topic: str) -> ExportState:
        if not path.exists():
            return cls(topic)
        try:
            doc = json.loads(path.read_text())
            state = cls(doc["topic"], int(doc["round"]),
                        {int(p): int(o) for p, o in doc["offsets"].items()})
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError("--out", str(path), f"holds an unreadable export state ({exc}); "
                                                  "it was not written by this job") from None
        if state.topic != topic:
            raise ConfigError("--topic", topic, f"{path.parent} holds an export of topic "
                                                f"{state.topic!r}; use another --out")
        return state


def plan_round(chains: Mapping[int, list[ChainLink]], offsets: Mapping[int, int],
               max_bytes: int) -> dict[int, tuple[int, int]]:
    """partition -> [start, end) of the next round: whole segments from each partition's
    next offset, about `max_bytes` in all (at least one segment when anything is left).
    Empty when everything tiered is exported."""
    out: dict[int, tuple[int, int]] = {}
    budget = max_bytes
    for p in sorted(chains):
        chain = chains[p]
        bounds = tier_bounds(chain)
        if bounds is None:
            continue
        start = offsets.get(p, bounds[0])
        if start < bounds[0]:
            raise OffsetOutOfRangeError(
                f"partition {p}: the export continues at offset {start} but the remote tier "
                f"now starts at {bounds[0]} (retention deleted records not yet exported)",
                offset=start, log_start_offset=bounds[0], log_end_offset=bounds[1])
        end = start
        for link in chain:
            if link.end <= end:
                continue
            if budget <= 0 and (out or end > start):
                break
            end = link.end
            budget -= link.segment.segment_size_in_bytes
        if end > start:
            out[p] = (start, end)
        if budget <= 0:
            break
    return out


def next_round(props: Mapping[str, str], config_path: str | None, topic: str,
               bucket: str | None, store: Mapping[str, str] | None,
               offsets: Mapping[int, int], max_bytes: int) -> dict[int, tuple[int, int]]:
    """plan_round over the tier as of now (see tier_for_export for the arguments naming it).
    Raises UnknownTopicError when nothing of `topic` is tiered."""
    with tier_for_export(props, config_path, topic, bucket, store) as tier:
        chains = tier.chains(topic)
    if not chains:
        raise UnknownTopicError(f"unknown topic {topic!r}: nothing of it is in the remote "
                                "tier")
    return plan_round(chains, offsets, max_bytes)
