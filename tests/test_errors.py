"""The one error model: every error class the engine defines is a KafkaEngineError that
engine.errors exports, and re-raising with context keeps the subclass and its fields."""

from __future__ import annotations

import errno
import importlib
import inspect
import pkgutil

import pytest

import engine
import engine.errors as errors
from engine.errors import (
    ConfigError,
    KafkaEngineError,
    OffsetOutOfRangeError,
    RemoteResourceNotFoundError,
    UnknownTopicOrPartitionError,
)

#: public exceptions that are control flow, not errors: a read that would block on the RSM,
#: caught by the RLM's read planning (which is to return a plain result type instead)
#: control flow between the modules of one package, caught there and never raised to callers
_INTERNAL = {"engine.remote.segment_access.WouldBlock",
             "engine.remote.objectstore.loops.CallsClosed"}


def _engine_modules():
    for info in pkgutil.walk_packages(engine.__path__, "engine."):
        if info.name.endswith(".__main__"):
            continue  # runs the command line when imported
        yield importlib.import_module(info.name)


def test_every_engine_error_is_a_kafka_engine_error_exported_by_engine_errors():
    exported = {getattr(errors, name) for name in errors.__all__}
    seen = 0
    for module in _engine_modules():
        for name, obj in vars(module).items():
            if not (inspect.isclass(obj) and issubclass(obj, BaseException)):
                continue
            if not obj.__module__.startswith("engine."):
                continue  # a builtin or a library's, imported for use
            seen += 1
            if obj.__name__.startswith("_"):
                continue  # module-private: control flow caught inside its module
            if f"{obj.__module__}.{obj.__qualname__}" in _INTERNAL:
                continue
            assert issubclass(obj, KafkaEngineError), f"{module.__name__}.{name}"
            assert obj in exported, f"{module.__name__}.{name} is not in engine.errors"
    assert seen > 20


def test_unknown_partition_is_a_lookup_error_never_a_key_error():
    assert issubclass(UnknownTopicOrPartitionError, LookupError)
    assert not issubclass(UnknownTopicOrPartitionError, KeyError)
    error = UnknownTopicOrPartitionError.no_log("orders", 3)
    assert (error.topic, error.partition) == ("orders", 3)
    assert str(error) == "no log for partition orders-3"


def test_with_context_keeps_the_subclass_and_its_fields():
    config = ConfigError("segment.bytes", "x", "must be an int", file="server.properties")
    again = config.with_context("topic orders")
    assert type(again) is ConfigError
    assert (again.key, again.value, again.rule, again.file) == (
        "segment.bytes", "x", "must be an int", "server.properties")
    assert str(again).startswith("topic orders: invalid value 'x' for config 'segment.bytes'")
    assert str(config).startswith("invalid value")  # the original is unchanged

    out = OffsetOutOfRangeError("offset 9 out of range", offset=9, position=4,
                                log_start_offset=0, log_end_offset=5)
    shifted = out.with_context("orders-0 segment 0", position_base=1000)
    assert type(shifted) is OffsetOutOfRangeError
    assert (shifted.offset, shifted.position) == (9, 1004)
    assert (shifted.log_start_offset, shifted.log_end_offset) == (0, 5)

    missing = RemoteResourceNotFoundError("no such object", file="/tier/x.log")
    missing.errno, missing.strerror = errno.ENOENT, "No such file or directory"
    copied = missing.with_context("copy of segment s")
    assert isinstance(copied, FileNotFoundError)
    assert (copied.errno, copied.strerror, copied.file) == (
        errno.ENOENT, "No such file or directory", "/tier/x.log")
    with pytest.raises(RemoteResourceNotFoundError, match="^copy of segment s: no such"):
        raise copied


def test_index_statuses_become_exceptions_in_one_place():
    from engine._native import index

    statuses = {name: getattr(index, name) for name in dir(index) if name.startswith("STATUS_")}
    assert len(statuses) == 7
    for name, status in statuses.items():
        error = index.status_error(status, f"refused: {name}", file="f.index", position=8,
                                   offset=3)
        if name.endswith("_FULL"):
            assert type(error) is errors.IndexFullError
        elif name == "STATUS_POSITION_OVERFLOW":
            assert type(error) is ValueError
        else:
            assert type(error) is errors.InvalidOffsetError
            assert (error.file, error.position, error.offset) == ("f.index", 8, 3)
