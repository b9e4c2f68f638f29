"""What the broker-side commands (`run`, `fetch`, `list-offsets`, `status`, `configs`,
`demo`) share: loading the broker file, the topic-config store, the process lock on the log
dirs, opening the LogManager with the stored topic overrides applied, reads through the RLM
or (a broker without tiered storage) the local logs alone, and the error convention.

Order matters for "nothing touched on error": the broker file and every stored override
are validated before a log dir is locked or a log opened (opening a LogManager deletes
`.kafka_cleanshutdown` and may recover segments).
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys

from engine.cli._bucket_args import _UsageError
from engine.config import (
    BrokerConfig,
    ConfigError,
    TopicConfigStore,
    create_missing_dirs,
    load_broker_config,
)
from engine.errors import (
    InvalidTopicError,
    KafkaEngineError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from engine.log.log_manager import LogManager, parse_partition_dir_name, validate_topic_name

__all__ = [
    "LOG_DIR_LOCK_FILE",
    "BrokerSession",
    "LocalReads",
    "apply_topic_overrides",
    "cli_errors",
    "existing_topics",
    "open_broker",
]

#: Held (flock) by the process that has the log dirs open, as Kafka's `.lock`: a second
#: `run` or a `fetch` beside a live `run` fails at once instead of recovering logs that
#: another process is appending to.
LOG_DIR_LOCK_FILE = ".engine.lock"


def existing_topics(broker: BrokerConfig) -> dict[str, list[int]]:
    """Topic -> partitions found as `<topic>-<partition>` directories in the log dirs
    (read from the directory listing only: no log is opened)."""
    topics: dict[str, list[int]] = {}
    for d in broker.log_dirs:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            tp = parse_partition_dir_name(name)
            if tp is not None and os.path.isdir(os.path.join(d, name)):
                topics.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(ps) for t, ps in sorted(topics.items())}


def check_topic(topic: str) -> None:
    """Kafka's topic-name rules: rejects `../x`, `a/b`, empty names before any path is
    built from them."""
    validate_topic_name(topic)


def validate_store(broker: BrokerConfig, store: TopicConfigStore) -> None:
    """Every stored override must still pass against this broker file."""
    for topic in store.read():
        store.resolve(topic, broker)


def apply_topic_overrides(manager: LogManager, store: TopicConfigStore,
                          topics=None) -> list[str]:
    """Applies the stored overrides of each topic with open logs (all, or `topics`)
    through LogManager.update_topic_config. Topics without overrides get the broker
    defaults back (an override deleted while `run` was live). Returns the topics updated."""
    stored = store.read()
    names = sorted({tp.topic for tp in manager.partitions()})
    done = []
    for topic in names:
        if topics is not None and topic not in topics:
            continue
        manager.update_topic_config(topic, stored.get(topic, {}))
        done.append(topic)
    return done


class _DirLocks:
    def __init__(self, dirs) -> None:
        self._fds: list[int] = []
        try:
            for d in dirs:
                path = os.path.join(d, LOG_DIR_LOCK_FILE)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                self._fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise LogDirLockedError(
                        f"log dir {d} is in use by another process (a running "
                        "`python -m engine run`?)", file=path) from None
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing drops the flock
        self._fds = []


class BrokerSession:
    """The broker's log dirs opened for one command: validated config, process lock,
    LogManager with stored overrides, and (on demand) the RemoteLogManager. `close()`
    closes the RLM first (it finishes or aborts its current copy), then shuts the logs
    down cleanly, then releases the lock."""

    def __init__(self, broker: BrokerConfig, config_path: str | None = None) -> None:
        self.broker = broker
        self.config_path = config_path
        self.store = TopicConfigStore.of(broker)
        validate_store(broker, self.store)
        create_missing_dirs(broker)  # after every check, as Kafka creates missing log dirs
        self._locks = _DirLocks(broker.log_dirs)
        self.rlm = None
        try:
            # the stored overrides apply as the logs load (LogManager's topic_overrides)
            self.log_manager = LogManager(broker.log_dirs, broker_config=broker,
                                          topic_overrides=self.store.read())
        except BaseException:
            self._locks.release()
            raise

    def remote_log_manager(self):
        """The RLM over these logs, its view of every tiered partition brought up to date
        as a restarted broker's first copy-task run does (the log start offset and the
        highest copied offset from the tier): without it a one-shot command in a fresh
        process would report latest-tiered -1 and every local segment as copy lag.
        `initialise_partitions()` does this for every tiered leader without copying."""
        if self.rlm is None:
            from engine.rlm import RemoteLogManager
            self.rlm = RemoteLogManager.from_config(self.broker, self.log_manager)
            self.rlm.initialise_partitions()
        return self.rlm

    @property
    def tiered_storage(self) -> bool:
        return bool(self.broker["remote.log.storage.system.enable"])

    def reader(self):
        """What serves `fetch` and `list-offsets`: the RLM (local and remote data), or for a
        broker without tiered storage its local logs alone (LocalReads): such a broker is
        still a broker, and Kafka serves its fetches and ListOffsets from the local log."""
        if self.tiered_storage:
            return self.remote_log_manager()
        return LocalReads(self.log_manager)

    def log(self, topic: str, partition: int):
        check_topic(topic)
        unified = self.log_manager.get_log(topic, partition)
        if unified is None:
            raise UnknownTopicOrPartitionError.no_log(
                topic, partition, f" in log dirs {', '.join(map(str, self.broker.log_dirs))}")
        return unified

    def close(self) -> None:
        try:
            if self.rlm is not None:
                self.rlm.close()
        finally:
            try:
                self.log_manager.shutdown()
            finally:
                self._locks.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalReads:
    """The RemoteLogManager's `read`, `read_many` and `list_offsets` over the local logs
    only, for a broker with `remote.log.storage.system.enable=false` (the RLM needs a tier
    and refuses to start without it). Answers as the RLM does for a partition that is not
    tiered: the same reader (engine.rlm.reader.read_local) and ListOffsets rules."""

    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager

    def _log(self, topic: str, partition: int):
        unified = self.log_manager.get_log(topic, partition)
        if unified is None:
            raise UnknownTopicOrPartitionError.no_log(topic, partition)
        return unified

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             min_one_message: bool = True, isolation: str = "read_uncommitted"):
        from engine.rlm.reader import read_local

        return read_local(self._log(topic, partition), topic, partition, offset, max_bytes,
                          min_one_message, isolation)

    def read_many(self, requests, *, min_one_message: bool = True,
                  isolation: str = "read_uncommitted") -> list:
        """`read` of each (topic, partition, offset, max_bytes[, min_one_message])
        request, answered as the RLM's read_many answers: never raises for one partition,
        whose result carries its error."""
        from engine.rlm.reader import RemoteFetchResult

        out = []
        for request in requests:
            topic, partition, offset, max_bytes = request[:4]
            one = request[4] if len(request) > 4 else min_one_message
            try:
                out.append(self.read(topic, partition, offset, max_bytes, one, isolation))
            except Exception as exc:  # noqa: BLE001 - that partition's answer
                out.append(RemoteFetchResult(topic, int(partition), offset, b"", offset,
                                             error=exc))
        return out

    def list_offsets(self, topic: str, partition: int, spec) -> tuple[int, int]:
        from engine.rlm.offsets import list_offsets

        return list_offsets(None, self._log(topic, partition), None, spec)


def open_broker(config_path: str) -> BrokerSession:
    return BrokerSession(load_broker_config(config_path), config_path)


#: OS errors that say a path is not what the broker file implies (a file where a directory
#: belongs, no permission, a read-only mount): bad input, as a bad config value is
_PATH_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENOENT,
                          errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG,
                          errno.ELOOP})


def _os_error_line(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno else None
    what = exc.strerror or str(exc)
    if isinstance(exc, FileExistsError):
        what = "exists, and is not what the engine creates there (a file for a directory?)"
    where = f"{exc.filename}: " if exc.filename is not None else ""
    return f"error: {where}{what}" + (f" ({name})" if name else "")


def cli_errors(fn):
    """Runs a command; bad input (config, topic name, missing partition, offsets out of
    range, a locked log dir, a path in the log dirs that is not what it should be) is one
    `error: ...` line on stderr and exit status 2; other engine errors (damaged data, a
    failing tier or disk) are one line and exit status 1."""

    def run(args) -> int:
        try:
            return fn(args)
        except (ConfigError, InvalidTopicError, LogDirLockedError,
                UnknownTopicOrPartitionError, _UsageError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except OffsetOutOfRangeError as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        except KafkaEngineError as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:  # typed engine errors are above; this is a path or a disk
            print(_os_error_line(exc), file=sys.stderr)
            return 2 if exc.errno in _PATH_ERRNOS else 1

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run
