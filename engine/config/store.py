"""`TopicConfigStore`: the durable per-topic config overrides of `configs --alter`, one JSON
file rewritten atomically under an advisory lock, every change validated by `TopicConfig`.
"""

from __future__ import annotations

import difflib
import fcntl
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from engine.config.broker import BrokerConfig, TopicConfig
from engine.config.definitions import TOPIC_CONFIGS
from engine.errors import ConfigError

#: The durable per-topic overrides, in the first log dir (where Kafka's KRaft broker keeps
#: nothing of the kind: it has the metadata log; the engine has this one small file).
TOPIC_CONFIG_STORE_FILE = "topic-config-overrides.json"
_STORE_VERSION = 1


class TopicConfigStore:
    """Per-topic config overrides (Kafka names, values as given), durable in one JSON file
    `{"version": 1, "topics": {topic: {key: value}}}`, rewritten atomically (temp file,
    fsync, rename, fsync of the directory) under an advisory lock so concurrent
    `configs --alter` runs do not lose each other's changes. Every change is validated with
    TopicConfig's rules against the broker config before anything is written.
    """

    def __init__(self, path) -> None:
        self.path = os.fspath(path)

    @classmethod
    def of(cls, broker: BrokerConfig) -> TopicConfigStore:
        """The store of a broker: in its first log dir."""
        return cls(os.path.join(broker.log_dirs[0], TOPIC_CONFIG_STORE_FILE))

    def read(self) -> dict[str, dict[str, str]]:
        """All overrides by topic; {} when the file does not exist. ConfigError naming the
        file when it is not a store this version wrote."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ConfigError(None, data[:60], f"not a topic-config store: {exc}",
                              file=self.path) from None
        if (not isinstance(doc, dict) or doc.get("version") != _STORE_VERSION
                or not isinstance(doc.get("topics"), dict)):
            raise ConfigError(None, data[:60], f"not a version {_STORE_VERSION} topic-config "
                              "store", file=self.path)
        topics: dict[str, dict[str, str]] = {}
        for topic, overrides in doc["topics"].items():
            if not isinstance(overrides, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in overrides.items()):
                raise ConfigError(None, overrides, f"overrides of topic {topic!r} must map "
                                  "names to strings", file=self.path)
            topics[topic] = dict(overrides)
        return topics

    def overrides(self, topic: str) -> dict[str, str]:
        return dict(self.read().get(topic, {}))

    def resolve(self, topic: str, broker: BrokerConfig,
                topic_defaults: Mapping[str, Any] | None = None) -> TopicConfig:
        """The topic's TopicConfig from the store (ConfigError naming the file if the stored
        overrides no longer pass, e.g. after the broker file changed)."""
        merged = {**dict(topic_defaults or {}), **self.overrides(topic)}
        try:
            return TopicConfig.resolve(merged, broker)
        except ConfigError as exc:
            raise ConfigError(exc.key, exc.value, f"topic {topic!r}: {exc.rule}",
                              file=self.path) from None

    def alter(self, topic: str, broker: BrokerConfig, *, add: Mapping[str, Any] | None = None,
              delete: Iterable[str] = ()) -> dict[str, str]:
        """Sets `add` and removes `delete` (kafka-configs.sh --add-config/--delete-config)
        for `topic`, validated as a whole: unknown keys, invalid values, Kafka's tiering
        rules (local vs total retention, remote.storage.enable needing the system,
        remote.log.copy.disable needing local == total retention) and disabling
        remote.storage.enable only with remote.log.delete.on.disable=true (KRaft's rule).
        Deleting a key that is not set is a no-op, as Kafka's incremental alter. Returns the
        topic's new overrides. Nothing is written when a rule fails."""
        add = {k: str(v).strip() for k, v in dict(add or {}).items()}
        delete = list(delete)
        for key in list(add) + delete:
            if key not in TOPIC_CONFIGS:
                close = difflib.get_close_matches(key, list(TOPIC_CONFIGS), n=1, cutoff=0.8)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(key, add.get(key), f"unknown topic config{hint}")
        both = sorted(set(add) & set(delete))
        if both:
            raise ConfigError(both[0], add[both[0]], "cannot be both added and deleted")

        def plan() -> tuple[dict, dict]:
            topics = self.read()
            before = topics.get(topic, {})
            after = {k: v for k, v in before.items() if k not in delete}
            after.update(add)
            new = TopicConfig.resolve(after, broker)  # raises on any broken rule
            raw = before.get("remote.storage.enable")
            was_tiered = (broker["remote.storage.enable"] if raw is None
                          else raw.strip().lower() == "true")
            if was_tiered and not new["remote.storage.enable"] and not new[
                    "remote.log.delete.on.disable"]:
                raise ConfigError(
                    "remote.storage.enable", False,
                    "disabling tiering needs remote.log.delete.on.disable=true (deletes the "
                    "remote data); to keep it read-only set remote.log.copy.disable=true")
            changed = dict(topics)
            if after:
                changed[topic] = dict(sorted(after.items()))
            else:
                changed.pop(topic, None)
            return changed if changed != topics else None, after

        plan()  # refuse bad input before creating the lock file
        with self._locked():
            changed, after = plan()  # again under the lock: another writer may have won
            if changed is not None:
                self._write(changed)
            return after

    def remove_topic(self, topic: str) -> bool:
        """Forgets a deleted topic's overrides. Returns whether it had any."""
        with self._locked():
            topics = self.read()
            if topics.pop(topic, None) is None:
                return False
            self._write(topics)
            return True

    def _locked(self):
        return _FileLock(self.path + ".lock")

    def _write(self, topics: Mapping[str, Mapping[str, str]]) -> None:
        doc = {"version": _STORE_VERSION, "topics": {t: dict(o) for t, o in sorted(topics.items())}}
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        directory = os.path.dirname(os.path.abspath(self.path))
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class _FileLock:
    """An exclusive flock held for a read-modify-write of a small file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def __enter__(self):
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
