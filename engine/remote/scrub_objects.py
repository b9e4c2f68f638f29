"""The stored objects of the engine's two tiers as a scrub through the RLMM sees them:
listed by partition and segment, the objects a segment's metadata says it has, their
checks against what the segment records of them, and deletes.

- the object-store tier (the Aiven plugin's layout, `engine.remote.objectstore.keys`): keys
  under the configured `key.prefix`; per segment `.log`, `.indexes` and `.rsm-manifest`,
  their sizes checked against the manifest (`scrub_checks.check_manifest`). A segment whose
  custom metadata names another prefix or key is read there (a HEAD finds its size).
- the filesystem tier (`engine.remote.filesystem`): files under every configured dir's
  `kafka-tiered-storage/<topic>-<partition>-<topicId>/`; per segment `.log`, `.index`,
  `.timeindex`, `.snapshot`, `.leader_epoch_checkpoint` and the `.txnindex` when its
  checksum record names one; the `.log` of the size in the segment's metadata, each file of
  the size its checksum record gives (the reads check the CRCs). `.tmp` files (a copy under
  way or interrupted) belong to their segment.

An object is named by its key: the object key, or the file's path.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.common import Uuid
from engine.config import ConfigError
from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from engine.remote.metadata_log import parse_partition_dir_name
from engine.remote.scrub_checks import PacedStorage, SegmentFindings, check_manifest
from engine.remote.storage import IndexType, RemoteStorageManager

__all__ = ["FileSystemObjects", "ObjectStoreObjects", "Stored", "TierObjects",
           "objects_of"]

#: (start offset, segment id): how keys and file names name a segment
Stem = tuple[int, Uuid]


@dataclass
class Stored:
    """A tier's objects by partition and segment: key -> (suffix, size)."""

    partitions: dict[TopicIdPartition, dict[Stem, dict[str, tuple[str, int]]]] = \
        field(default_factory=dict)

    def add(self, tip: TopicIdPartition, stem: Stem, key: str, suffix: str, size: int) -> None:
        self.partitions.setdefault(tip, {}).setdefault(stem, {})[key] = (suffix, size)

    def count(self) -> int:
        return sum(len(objs) for segs in self.partitions.values() for objs in segs.values())


class TierObjects(abc.ABC):
    """One tier's layout (see the module docstring)."""

    #: where the objects are, for the report
    where: str
    #: the suffix of a segment's `.log`, and of the object naming the segment in findings
    log_suffix: str
    main_suffix: str

    @abc.abstractmethod
    def listing(self) -> Stored:
        """Every segment object of the tier, as it is now."""

    @abc.abstractmethod
    def expected(self, md: RemoteLogSegmentMetadata) -> dict[str, tuple[str, bool]]:
        """suffix -> (the key a read of it uses, whether a finished segment must have it)."""

    @abc.abstractmethod
    def find(self, md: RemoteLogSegmentMetadata, suffix: str, key: str,
             listed: dict[str, tuple[str, int]]) -> tuple[str, int | None]:
        """(key, size) of the segment's object `suffix` (size None: absent); `listed` holds
        the segment's listed objects."""

    @abc.abstractmethod
    def check(self, paced: PacedStorage, md: RemoteLogSegmentMetadata,
              objects: dict[str, tuple[str, int | None]], found: SegmentFindings) -> bool:
        """The objects' sizes against what the segment records; False when its data cannot
        be checked after this."""

    @abc.abstractmethod
    def index_key(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
        """The key of the object holding the segment's index `index_type`."""

    def main_key(self, md: RemoteLogSegmentMetadata) -> str:
        """The key naming the segment in findings about all of it."""
        return self.expected(md)[self.main_suffix][0]

    @abc.abstractmethod
    def delete(self, keys: list[str]) -> None:
        """Deletes these objects (absent ones are no error)."""


def objects_of(rsm: RemoteStorageManager) -> TierObjects:
    """The layout of `rsm`, one of the engine's tiers. ConfigError for another RSM (its layout is
    its own)."""
    from engine.remote.filesystem import FileSystemRemoteStorageManager

    if isinstance(rsm, FileSystemRemoteStorageManager):
        return FileSystemObjects(rsm)
    from engine.remote.objectstore.rsm import ObjectStorageRemoteStorageManager

    if isinstance(rsm, ObjectStorageRemoteStorageManager):
        return ObjectStoreObjects(rsm)
    raise ConfigError("remote.log.storage.manager.class.name", type(rsm).__name__,
                      "not one of the engine's tiers: scrub cannot list its objects")


# ---- object store ---------------------------------------------------------------------------

class ObjectStoreObjects(TierObjects):
    def __init__(self, rsm):
        from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST

        self.rsm = rsm
        self.store = rsm.store
        self.prefix = rsm.keys.prefix
        self.where = self.store.url(self.prefix)
        self._suffixes = (LOG, INDEXES, MANIFEST)
        self.log_suffix, self.main_suffix = LOG, MANIFEST

    def listing(self) -> Stored:
        from engine.remote.bucket import group_listing

        out = Stored()
        listing = group_listing(self.store.list(self.prefix), self.prefix)
        for tip, segments in listing.partitions.items():
            for seg in segments:
                stem = (seg.start_offset, seg.segment_id)
                sizes = (seg.log_size, seg.indexes_size, seg.manifest_size)
                for suffix, size in zip(self._suffixes, sizes):
                    if size is not None:
                        key = f"{self.prefix}{seg.main_path(tip)}.{suffix}"
                        out.add(tip, stem, key, suffix, size)
        return out

    def expected(self, md):
        from engine.remote.objectstore import custom_metadata as cm
        from engine.remote.objectstore.keys import MANIFEST

        keys = self.rsm.keys
        fields: dict = {}
        if md.custom_metadata is not None:
            try:
                fields = cm.decode_custom_metadata(md.custom_metadata)
            except ValueError:
                fields = {}  # the reads say so, naming the segment
        return {s: (keys.key(md, s) if s == MANIFEST else keys.key_for_read(
            md, s, fields.get(cm.OBJECT_PREFIX), fields.get(cm.OBJECT_KEY)), True)
            for s in self._suffixes}

    def find(self, md, suffix, key, listed):
        if key in listed:
            return key, listed[key][1]
        try:  # written since the listing, or under another prefix (its custom metadata)
            return key, self.store.head(key).size
        except RemoteResourceNotFoundError:
            return key, None

    def check(self, paced, md, objects, found):
        from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST

        return check_manifest(paced, self.store, objects[MANIFEST][0],
                              {LOG: objects[LOG], INDEXES: objects[INDEXES]}, md, found)

    def index_key(self, md, index_type):
        from engine.remote.objectstore.keys import INDEXES

        return self.expected(md)[INDEXES][0]

    def delete(self, keys):
        self.store.delete(keys)


# ---- filesystem ---------------------------------------------------------------------------

_FILE_RE = re.compile(r"(?P<offset>[0-9]{20})-(?P<segment_id>[A-Za-z0-9_-]{22})"
                      r"(?P<suffix>\.[a-z_]+)(?P<tmp>\.tmp)?")


class FileSystemObjects(TierObjects):
    def __init__(self, rsm):
        from engine.remote.filesystem.layout import FILE_SUFFIXES, ROOT_DIR_NAME

        self.rsm = rsm
        self.roots = [Path(d) / ROOT_DIR_NAME for d in rsm.dirs]
        self.where = ",".join(map(str, self.roots))
        self._suffixes = FILE_SUFFIXES
        self.log_suffix = self.main_suffix = FILE_SUFFIXES[0]

    def listing(self) -> Stored:
        out = Stored()
        for root in self.roots:
            for pdir in _entries(root):
                tip = parse_partition_dir_name(pdir)
                if tip is None or not (root / pdir).is_dir():
                    continue
                for name in _entries(root / pdir):
                    m = _FILE_RE.fullmatch(name)
                    if m is None or m["suffix"] not in self._suffixes:
                        continue
                    try:
                        stem = (int(m["offset"]), Uuid.from_string(m["segment_id"]))
                        size = os.stat(root / pdir / name).st_size
                    except (ValueError, FileNotFoundError):
                        continue  # not a segment's name; or deleted since the listing
                    out.add(tip, stem, str(root / pdir / name),
                            m["suffix"] + (m["tmp"] or ""), size)
        return out

    def _checksums(self, md):
        from engine.remote.filesystem.layout import SegmentChecksums

        try:
            return SegmentChecksums.of(md)
        except RemoteStorageError:
            return None  # the reads say so, naming the segment

    def expected(self, md):
        from engine.remote.filesystem.layout import TXN_INDEX

        checksums = self._checksums(md)
        out = {}
        for suffix in self._suffixes:
            required = suffix != TXN_INDEX or (checksums is not None
                                               and TXN_INDEX in checksums.files)
            out[suffix] = (str(self.rsm.segment_path(md, suffix)), required)
        return out

    def find(self, md, suffix, key, listed):
        for path, (listed_suffix, size) in listed.items():
            if listed_suffix == suffix:
                return path, size
        name = self.rsm.segment_file_name(md, suffix)
        pdir = self.rsm.partition_dir_name(md.topic_id_partition)
        for root in self.roots:  # written since the listing
            with contextlib.suppress(FileNotFoundError):
                return str(root / pdir / name), os.stat(root / pdir / name).st_size
        return key, None

    def check(self, paced, md, objects, found):
        from engine.remote.filesystem.layout import LOG

        checksums = self._checksums(md)
        ok = True
        for suffix, (key, size) in objects.items():
            if size is None:
                continue
            if suffix == LOG:
                want, source = md.segment_size_in_bytes, "the segment's metadata"
            elif checksums is not None and suffix in checksums.files:
                want, source = checksums.files[suffix][1], "its checksum record"
            else:
                continue
            if size != want:
                found.add("size-mismatch", key, f"the file is {size} bytes, {source} says "
                                                f"{want}")
                ok = False
        return ok

    def index_key(self, md, index_type):
        from engine.remote.filesystem import layout

        suffix = {IndexType.OFFSET: layout.OFFSET_INDEX, IndexType.TIMESTAMP: layout.TIME_INDEX,
                  IndexType.TRANSACTION: layout.TXN_INDEX,
                  IndexType.PRODUCER_SNAPSHOT: layout.SNAPSHOT,
                  IndexType.LEADER_EPOCH: layout.LEADER_EPOCH}[index_type]
        return str(self.rsm.segment_path(md, suffix))

    def delete(self, keys):
        for key in keys:
            try:
                os.unlink(key)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise RemoteStorageError(f"cannot delete {key}: [Errno {exc.errno}] "
                                         f"{exc.strerror}", file=key) from exc


def _entries(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RemoteStorageError(f"cannot list {directory}: [Errno {exc.errno}] "
                                 f"{exc.strerror}", file=str(directory)) from exc
