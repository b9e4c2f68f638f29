"""Object keys of the object-store tier: exactly the Aiven tiered-storage plugin's layout, so a
bucket written by one is read by the other.

Per remote segment, three objects:

    <key.prefix><topic>-<topicId>/<partition>/<startOffset:020d>-<segmentId>.log
    ...                                                                    .indexes
    ...                                                                    .rsm-manifest

`key.prefix` is concatenated as it is (no separator is added, so a prefix meant as a folder
ends with `/`); `topicId` and `segmentId` are Kafka Uuid strings (22 characters of URL-safe
base64, which may contain `-` and `_`). The part after the prefix, without the suffix, is the
segment's *main path*.

When the segment's custom metadata (see `custom_metadata`) carries `object_prefix` and/or
`object_key`, they replace the configured prefix and the main path for reads of `.log` and
`.indexes`; the manifest, uploads and deletes always use the configured prefix and the main
path (the plugin does the same).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from engine.common import Uuid
from engine.remote.metadata import RemoteLogSegmentMetadata

__all__ = [
    "INDEXES",
    "LOG",
    "MANIFEST",
    "SUFFIXES",
    "ObjectKeyFactory",
    "ParsedObjectKey",
    "main_path",
    "parse_object_key",
]

LOG = "log"
INDEXES = "indexes"
MANIFEST = "rsm-manifest"
#: In upload order: the manifest last, so a manifest present means the other two are.
SUFFIXES = (LOG, INDEXES, MANIFEST)

# <topic>-<22-char topic id>/<partition>/<20 digits>-<22-char segment id>.<suffix>. Topic
# names may contain '-', so the topic id is the last 22 characters before the first '/'.
_KEY_RE = re.compile(
    r"(?P<topic>[^/]+)-(?P<topic_id>[A-Za-z0-9_-]{22})/(?P<partition>0|[1-9][0-9]{0,9})/"
    r"(?P<offset>[0-9]{20})-(?P<segment_id>[A-Za-z0-9_-]{22})\.(?P<suffix>log|indexes|rsm-manifest)")


def main_path(metadata: RemoteLogSegmentMetadata) -> str:
    """`<topic>-<topicId>/<partition>/<startOffset:020d>-<segmentId>`."""
    return _main_path(metadata.remote_log_segment_id, metadata.start_offset)


@functools.lru_cache(maxsize=4096)  # every read names its objects: base64 of two Uuids
def _main_path(segment_id, start_offset: int) -> str:
    tip = segment_id.topic_id_partition
    return f"{tip.topic}-{tip.topic_id}/{tip.partition}/{start_offset:020d}-{segment_id.id}"


class ObjectKeyFactory:
    """Builds object keys under one configured `key.prefix`."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = ""):
        self.prefix = prefix or ""

    def key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """The key under the configured prefix (uploads, deletes and every manifest)."""
        if suffix not in SUFFIXES:
            raise ValueError(f"unknown object suffix {suffix!r}")
        return f"{self.prefix}{main_path(metadata)}.{suffix}"

    def key_for_read(self, metadata: RemoteLogSegmentMetadata, suffix: str,
                     object_prefix: str | None, object_key: str | None) -> str:
        """The key a read of `.log` or `.indexes` uses: the custom metadata's
        `object_prefix` / `object_key` (when present) replace the configured prefix / main
        path."""
        if suffix == MANIFEST:
            return self.key(metadata, suffix)
        prefix = self.prefix if object_prefix is None else object_prefix
        main = main_path(metadata) if object_key is None else object_key
        return f"{prefix}{main}.{suffix}"

    def __repr__(self):
        return f"ObjectKeyFactory(prefix={self.prefix!r})"


@dataclass(frozen=True, slots=True)
class ParsedObjectKey:
    """What a key names: the segment's partition, start offset and id, and the suffix."""

    prefix: str
    topic: str
    topic_id: Uuid
    partition: int
    start_offset: int
    segment_id: Uuid
    suffix: str

    @property
    def main_path(self) -> str:
        return (f"{self.topic}-{self.topic_id}/{self.partition}/"
                f"{self.start_offset:020d}-{self.segment_id}")


def parse_object_key(key: str, prefix: str = "") -> ParsedObjectKey | None:
    """The parts of a key under `prefix`, None if it is not one of a segment's objects
    (bucket listings hold other objects too)."""
    if not key.startswith(prefix):
        return None
    m = _KEY_RE.fullmatch(key, len(prefix))
    if m is None:
        return None
    partition = int(m["partition"])
    offset = int(m["offset"])
    if partition > 2**31 - 1 or offset > 2**63 - 1:
        return None
    return ParsedObjectKey(prefix, m["topic"], Uuid.from_string(m["topic_id"]), partition,
                           offset, Uuid.from_string(m["segment_id"]), m["suffix"])
