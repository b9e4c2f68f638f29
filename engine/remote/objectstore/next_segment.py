"""The segment that follows another in the bucket, for read-ahead across segments when the
caller names none.

Kafka's broker asks its RemoteStorageManager for one segment at a time and never says which
comes next, so the object store's read-ahead (`read_forward`) would stop at every segment's
end, and a consumer catching up would wait for the first chunks of each new segment. The
bucket says which segment comes next: in the Aiven plugin's layout a segment's objects are
named by its start offset, so the one after a segment ending at offset `e` is the upload
under `<topic>-<topicId>/<partition>/<e + 1:020d>-<segmentId>` whose manifest exists (the
manifest is written last). One LIST of the partition's keys from that offset on finds it.

The lookup runs on a thread of its own, never on the caller's: the first read of a segment
names no next segment, a later one names what the LIST found. Each answer is kept per
segment (bounded); "none yet" (the partition's tail, or two uploads under the same start
offset, which only the broker's metadata tells apart) is asked again after
`RETRY_AFTER_S`. A wrong guess costs a few GETs, never a wrong byte: the read-ahead fills
the chunk cache under the guessed upload's object key and manifest identity, which a later
read hits only if Kafka reads that very upload.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time

from engine.errors import KafkaEngineError
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)
from engine.remote.objectstore.keys import MANIFEST, parse_object_key

__all__ = ["NextSegmentLookup"]

log = logging.getLogger(__name__)

#: segments whose answer is kept
KEPT = 4096
#: how long "no next segment yet" stands before a read asks the bucket again
RETRY_AFTER_S = 30.0
#: keys a listing page brings: a segment's three objects, a few uploads of it
_PAGE = 16


class NextSegmentLookup:
    """The next segments of an object store RSM's bucket, looked up in the background."""

    def __init__(self, rsm):
        self._rsm = rsm
        self._lock = threading.Lock()
        # segment id -> (the next segment or None, when it was looked up); None: in flight
        self._found: collections.OrderedDict = collections.OrderedDict()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="tier-engine-next-segment")

    def next_of(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """The segment after `metadata` if a lookup found it; else None, and a lookup is
        started unless one is running or answered "none" less than RETRY_AFTER_S ago."""
        sid = metadata.remote_log_segment_id.id
        now = time.monotonic()
        with self._lock:
            found = self._found.get(sid, False)
            if found is None:  # in flight
                return None
            if found is not False:
                nxt, at = found
                if nxt is not None or now - at < RETRY_AFTER_S:
                    self._found.move_to_end(sid)
                    return nxt
            self._found[sid] = None
            while len(self._found) > KEPT:
                self._found.popitem(last=False)
        try:
            self._pool.submit(self._look_up, metadata)
        except RuntimeError:  # closed
            with self._lock:
                self._found.pop(sid, None)
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _look_up(self, metadata: RemoteLogSegmentMetadata) -> None:
        sid = metadata.remote_log_segment_id.id
        nxt = None
        try:
            nxt = self._find(metadata)
        except (KafkaEngineError, OSError) as exc:  # read-ahead is an optimisation
            log.debug("the segment after %s: %r", metadata.remote_log_segment_id, exc)
        finally:  # whatever ended the lookup, it is no longer in flight: asked again later
            with self._lock:
                if sid in self._found:
                    self._found[sid] = (nxt, time.monotonic())
        if nxt is not None:
            self._rsm.read_forward(metadata, nxt)

    def _find(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        tip = metadata.topic_id_partition
        start = metadata.end_offset + 1
        prefix = self._rsm.keys.prefix
        folder = f"{prefix}{tip.topic}-{tip.topic_id}/{tip.partition}"
        first = f"{folder}/{start:020d}-"
        ids = set()
        # a listing's prefix is a folder: list the partition's from the start offset on, in
        # key order, until the keys name a later one
        for info in self._rsm.store.list(folder, page_size=_PAGE, offset=first[:-1]):
            if not info.key.startswith(first):
                if info.key > first:
                    break
                continue
            parsed = parse_object_key(info.key, prefix)
            if parsed is not None and parsed.suffix == MANIFEST:
                ids.add(parsed.segment_id)
        if len(ids) != 1:
            return None
        # what reading ahead needs: the objects' keys (the partition, start offset and id);
        # sizes and offsets come from the manifest, the rest is unknown here
        epoch = metadata.leader_epochs[-1][0]
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, ids.pop()), start, start, -1, metadata.broker_id,
            metadata.event_timestamp_ms, 0, {epoch: start},
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
