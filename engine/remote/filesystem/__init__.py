"""A RemoteStorageManager over plain directories: local disks, or a mounted NFS/HDFS/FUSE path.

Layout (the same names as Kafka's LocalTieredStorage, so a tree can be compared with one):

    <dir>/kafka-tiered-storage/<topic>-<partition>-<topicIdBase64>/
        <20-digit start offset>-<segmentUuidBase64>.log
        ...                                         .index
        ...                                         .timeindex
        ...                                         .txnindex         only if the segment had one
        ...                                         .snapshot         empty if the log had none
        ...                                         .leader_epoch_checkpoint

Placement: a partition lives in one of the configured dirs, chosen by rendezvous (highest
random weight) hashing of `<dir>` and `<topicIdBase64>-<partition>`, so a read finds it
without listing anything. When the dir list changes, only the partitions whose top-ranked dir
changed place their *new* segments elsewhere (about 1/n of them when a dir is added); reads
try the dirs in rank order, so segments written under the old list are still found (one
failed open per dir ranked above theirs), and deletes remove a segment's files from every
dir. Removing a dir from the list makes the segments stored only there unreachable.

Writes are crash-safe and idempotent: each file is written to `<name>.tmp` (truncated first,
so a retry overwrites whatever a failed attempt left), fsynced, renamed into place, and the
partition directory is fsynced; the `.log` is renamed last, after a directory fsync, so a
`.log` in place means the whole set is. A failed copy removes what it wrote.

Checksums: the copy returns KIP-917 custom metadata holding the CRC-32C and size of every
stored file (`SegmentChecksums`, at most 56 bytes, under Kafka's default 128-byte
`remote.log.metadata.custom.metadata.max.bytes`):

    byte 0      format version (1)
    byte 1      bitmask of stored files, bit i = FILE_SUFFIXES[i] (.log, .index, .timeindex,
                .txnindex, .snapshot, .leader_epoch_checkpoint)
    then, for each stored file in that order:
                crc32c  uint32 big-endian
                size    unsigned LEB128 varint (bytes)

Reads check them when the metadata carries them (a COPY_SEGMENT_FINISHED segment does):
`fetch_index` reads the whole file and checks its size and CRC every time; `.log` reads
check the file size whenever they open the file and, with `log.read.verification=full` (the
default), the CRC of the whole `.log` and of each record batch in it on the first read of
the segment in this process; the verdict is cached per segment id and (inode, size, mtime).
(The batch CRCs matter for a segment stored from damaged bytes: its file CRC matches. With
them checked here, `verifies_batch_crcs` lets readers skip their own per-read CRC pass.)
`read_range` keeps the `.log`
files of the 128 most recently read segments open (reference-counted, so eviction never
closes a file under a read; deleting a segment drops its file), so a ranged read is one
pread; `map_range` hands out read-only views of a mapping of the open file instead (no
copy; stored files are immutable, so the views stay valid, even after the file is deleted).
A mismatch raises RemoteStorageError naming the file. Metadata without custom metadata
(another RSM's, or a segment still being copied) is read unchecked.

Errors: a missing file raises RemoteResourceNotFoundError, any other OSError
RemoteStorageError; both name the path.

Modules: `layout` (names, placement, the checksum record, settings), `copy` (the copy
path), `read` (the read paths and the open-file cache), `files` (OS helpers that name the
errno and the file), `manager` (`FileSystemRemoteStorageManager`: settings, deletes, close;
it composes the three paths).

Thread-safety: every method may be called from any number of threads; only the open-file
cache (and its mappings) lives between calls, and all file I/O releases the GIL (a
`map_range` view's page faults happen where its bytes are read).
"""

from engine.remote.filesystem.layout import FILE_SUFFIXES, ROOT_DIR_NAME, SegmentChecksums
from engine.remote.filesystem.manager import FileSystemRemoteStorageManager

__all__ = [
    "FILE_SUFFIXES",
    "ROOT_DIR_NAME",
    "FileSystemRemoteStorageManager",
    "SegmentChecksums",
]
