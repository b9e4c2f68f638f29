"""`FileSystemRemoteStorageManager`: the filesystem tier's settings, lifecycle and deletes,
composed with its layout (`layout`), copy (`copy`) and read (`read`) paths.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from engine.config import ConfigError
from engine.remote.filesystem.copy import FileSystemCopy
from engine.remote.filesystem.files import _storage_error
from engine.remote.filesystem.layout import (
    _TMP,
    _VERIFICATION_MODES,
    FILE_SUFFIXES,
    ROOT_DIR_NAME,
    FileSystemLayout,
    _parse_bool,
    _parse_dirs,
)
from engine.remote.filesystem.read import (
    _OPEN_LOG_CACHE_SIZE,
    _VERIFY_LOCK_STRIPES,
    FileSystemReads,
    _OpenLogCache,
)
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.storage import RemoteStorageManager

__all__ = ["FileSystemRemoteStorageManager"]


class FileSystemRemoteStorageManager(FileSystemLayout, FileSystemCopy, FileSystemReads,
                                     RemoteStorageManager):
    """The filesystem tier. Construct with `dirs` (then ready) or empty and `configure`.

    Config keys (`rsm.config.` prefix stripped): `dirs` (required, comma-separated absolute
    paths, no duplicates), `broker.id` (int), `fsync` (true/false, default true: false only
    for tests and benchmarks on throwaway data), `log.read.verification` (`full` or `size`).
    """

    zero_copy_ranges = True  # map_range views a mapping of the stored, immutable file
    reads_local_files = True  # a read's storage I/O: open, check and map a local file

    def __init__(self, dirs=None, *, fsync: bool = True, log_read_verification: str = "full",
                 broker_id: int = -1):
        self._roots: list[Path] = []
        self._fsync = bool(fsync)
        self._verification = log_read_verification
        self.broker_id = int(broker_id)
        self._verified: OrderedDict = OrderedDict()
        self._verified_lock = threading.Lock()
        self._verify_locks = [threading.Lock() for _ in range(_VERIFY_LOCK_STRIPES)]
        self._open_logs = _OpenLogCache(_OPEN_LOG_CACHE_SIZE)
        self._closed = False
        if dirs is not None:
            self._set_dirs(_parse_dirs(list(map(str, dirs))))

    def configure(self, configs: Mapping[str, str]) -> None:
        """Creates each dir's `kafka-tiered-storage` root (and a missing dir: the broker's
        config file loader, engine.config.load_broker_config, requires its parent to exist,
        and the commands create it first, logged). Raises ConfigError naming the key for a
        missing or invalid value or a root that cannot be created."""
        mode = str(configs.get("log.read.verification", "full")).strip()
        if mode not in _VERIFICATION_MODES:
            raise ConfigError("log.read.verification", configs["log.read.verification"],
                              f"must be one of {list(_VERIFICATION_MODES)}")
        broker_id = configs.get("broker.id", -1)
        try:
            broker_id = int(str(broker_id).strip())
        except ValueError:
            raise ConfigError("broker.id", configs["broker.id"], "expected an int") from None
        fsync = _parse_bool("fsync", configs.get("fsync"), True)
        dirs = _parse_dirs(configs.get("dirs"))
        self._fsync, self._verification, self.broker_id = fsync, mode, broker_id
        self._set_dirs(dirs)

    def _set_dirs(self, dirs: list[Path]) -> None:
        for d in dirs:
            try:
                (d / ROOT_DIR_NAME).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError("dirs", ",".join(map(str, dirs)),
                                  f"cannot create {d / ROOT_DIR_NAME}: {exc}") from None
        self._roots = [d / ROOT_DIR_NAME for d in dirs]

    @property
    def dirs(self) -> list[Path]:
        """The configured dirs (each holds a `kafka-tiered-storage` root)."""
        return [r.parent for r in self._roots]

    # -- delete --------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Removes the segment's files (and leftover `.tmp` files) from every dir, then the
        partition directory if that left it empty. Idempotent."""
        self._check_open()
        self._open_logs.discard(metadata.remote_log_segment_id.id)
        self._remove_segment_files(metadata, self._ranked_roots(metadata.topic_id_partition),
                                   missing_ok=True, quiet=False)

    def _remove_segment_files(self, metadata, roots, *, missing_ok: bool, quiet: bool) -> None:
        pdir_name = self.partition_dir_name(metadata.topic_id_partition)
        first_error = None
        for root in roots:
            pdir = root / pdir_name
            for suffix in FILE_SUFFIXES:  # the .log first: without it the set is incomplete
                name = self.segment_file_name(metadata, suffix)
                for path in (pdir / name, pdir / (name + _TMP)):
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        first_error = first_error or _storage_error(exc,
                                                                    f"cannot delete {path}")
            with contextlib.suppress(OSError):  # not empty, or gone: either is fine
                pdir.rmdir()
        if first_error is not None and not quiet:
            raise first_error

    def close(self) -> None:
        self._closed = True
        self._open_logs.clear()

    def __reduce__(self):
        # Spark ships the manager to executors: rebuild it there from its settings (the
        # verification cache and locks are per process)
        return (_rebuild, (type(self), [str(d) for d in self.dirs], self._fsync,
                           self._verification, self.broker_id))

    def __repr__(self):
        return f"FileSystemRemoteStorageManager(dirs={[str(d) for d in self.dirs]})"


def _rebuild(cls, dirs, fsync, verification, broker_id):
    return cls(dirs or None, fsync=fsync, log_read_verification=verification,
               broker_id=broker_id)
