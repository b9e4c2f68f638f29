"""engine.config: properties parsing, broker defaults and validation, topic resolution."""

from __future__ import annotations

import json as _json
import os as _os
from pathlib import Path

import pytest

from engine.config import (
    BROKER_CONFIGS,
    KAFKA_BROKER_KEYS_NOT_USED,
    TOPIC_CONFIG_STORE_FILE,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    TopicConfig,
    TopicConfigStore,
    load_broker_config,
    load_properties,
    parse_properties,
)
from engine.errors import KafkaEngineError

LONG_MAX = 2**63 - 1


# ---------------------------------------------------------------- properties syntax


def test_properties_all_three_separators_and_surrounding_whitespace():
    text = "a=1\nb: 2\nc 3\n  d  =  4  \ne\t:\tfive\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "five"}


def test_properties_only_first_separator_splits():
    assert parse_properties("url=http://h:9092/x=y") == {"url": "http://h:9092/x=y"}
    assert parse_properties("k = = v") == {"k": "= v"}


def test_properties_comments_and_blank_lines():
    text = "# comment = 1\n! bang: 2\n\n   \n  # indented comment\nk=v # not a comment\n"
    assert parse_properties(text) == {"k": "v # not a comment"}


def test_properties_key_without_value():
    assert parse_properties("alone\nempty=\n") == {"alone": "", "empty": ""}


def test_properties_continuation_drops_leading_whitespace_of_next_line():
    text = "log.dirs=/d1,\\\n    /d2,\\\n\t/d3\nnext=1\n"
    assert parse_properties(text) == {"log.dirs": "/d1,/d2,/d3", "next": "1"}


def test_properties_continued_line_starting_with_hash_is_not_a_comment():
    assert parse_properties("k=a\\\n#b\n") == {"k": "a#b"}


def test_properties_comment_line_ending_in_backslash_does_not_continue():
    assert parse_properties("# c \\\nk=v\n") == {"k": "v"}


def test_properties_even_backslashes_are_an_escaped_backslash_not_a_continuation():
    assert parse_properties("path=C:\\\\dir\\\\\nk=v\n") == {"path": "C:\\dir\\", "k": "v"}


def test_properties_backslash_at_end_of_input_is_dropped():
    assert parse_properties("k=v\\") == {"k": "v"}


def test_properties_escapes_in_keys_and_values():
    text = "a\\ b\\=c\\:d=x\\ty\\nz\\r\\f\nu=\\u0041\\u00e9\nother=\\q\\#\n"
    assert parse_properties(text) == {"a b=c:d": "x\ty\nz\r\f", "u": "A\u00e9", "other": "q#"}


def test_properties_malformed_unicode_escape_names_the_line():
    with pytest.raises(ConfigError, match="line 2.*malformed"):
        parse_properties("ok=1\nbad=\\u12G4\n")


def test_properties_crlf_and_cr_line_endings():
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_properties_duplicate_keys_last_wins():
    assert parse_properties("k=1\nk=2\nk:3\n") == {"k": "3"}


def test_load_properties_reads_latin1_like_kafka(tmp_path):
    path = tmp_path / "server.properties"
    path.write_bytes(b"broker.id=3\nname=caf\xe9\n")
    assert load_properties(str(path)) == {"broker.id": "3", "name": "caf\u00e9"}


def test_load_properties_missing_file_is_oserror(tmp_path):
    with pytest.raises(OSError):
        load_properties(str(tmp_path / "nope.properties"))


# ---------------------------------------------------------------- definitions table


def test_every_definition_has_a_doc_and_a_valid_default():
    for table in (BROKER_CONFIGS, TOPIC_CONFIGS):
        for name, definition in table.items():
            assert definition.name == name and definition.doc
            if definition.default is not None:
                assert definition.parse(definition.default) == definition.default


def test_every_topic_synonym_is_a_broker_config():
    for definition in TOPIC_CONFIGS.values():
        for key, _factor in definition.synonyms:
            assert key in BROKER_CONFIGS, (definition.name, key)


# ---------------------------------------------------------------- broker defaults


@pytest.mark.parametrize(
    ("name", "default"),
    [
        ("log.segment.bytes", 1073741824),
        ("log.index.size.max.bytes", 10485760),
        ("log.index.interval.bytes", 4096),
        ("log.retention.hours", 168),
        ("log.retention.ms", None),
        ("log.retention.bytes", -1),
        ("log.local.retention.ms", -2),
        ("log.local.retention.bytes", -2),
        ("log.segment.delete.delay.ms", 60000),
        ("log.preallocate", False),
        ("remote.log.storage.system.enable", False),
        ("remote.log.manager.task.interval.ms", 30000),
        ("remote.log.manager.copier.thread.pool.size", 10),
        ("remote.log.manager.expiration.thread.pool.size", 10),
        ("remote.log.manager.follower.thread.pool.size", 2),
        ("remote.log.reader.threads", 10),
        ("remote.log.reader.max.pending.tasks", 100),
        ("remote.log.index.file.cache.total.size.bytes", 1073741824),
        ("remote.log.manager.copy.max.bytes.per.second", LONG_MAX),
        ("remote.log.manager.fetch.max.bytes.per.second", LONG_MAX),
        ("remote.log.manager.task.retry.backoff.ms", 500),
        ("remote.log.manager.task.retry.backoff.max.ms", 30000),
        ("remote.log.manager.task.retry.jitter", 0.2),
        ("remote.log.storage.manager.class.name", None),
        ("remote.log.storage.manager.impl.prefix", "rsm.config."),
        ("remote.log.metadata.manager.impl.prefix", "rlmm.config."),
        ("remote.log.metadata.custom.metadata.max.bytes", 128),
        ("remote.fetch.max.wait.ms", 500),
    ],
)
def test_broker_defaults(name, default):
    assert BrokerConfig({})[name] == default


def test_broker_typed_access_and_type_mismatch():
    cfg = BrokerConfig({"log.segment.bytes": " 2048 ", "log.preallocate": "TRUE",
                        "remote.log.manager.task.retry.jitter": "0.5"})
    assert cfg.get_int("log.segment.bytes") == 2048
    assert cfg.get_bool("log.preallocate") is True
    assert cfg.get_double("remote.log.manager.task.retry.jitter") == 0.5
    assert cfg.get_string("remote.log.storage.manager.impl.prefix") == "rsm.config."
    assert cfg.get_list("log.cleanup.policy") == ["delete"]
    with pytest.raises(TypeError, match="log.preallocate"):
        cfg.get_int("log.preallocate")
    with pytest.raises(KeyError):
        cfg.get_int("no.such.config")
    with pytest.raises(KeyError):
        cfg["no.such.config"]


def test_log_dirs_list_and_log_dir_fallback():
    assert BrokerConfig({}).log_dirs == ["/tmp/kafka-logs"]
    assert BrokerConfig({"log.dir": "/one"}).log_dirs == ["/one"]
    cfg = BrokerConfig({"log.dir": "/one", "log.dirs": " /a , /b,/c "})
    assert cfg.log_dirs == ["/a", "/b", "/c"]


@pytest.mark.parametrize("value", ["", " , ", "/a,,/b"])
def test_log_dirs_with_empty_entries_rejected(value):
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"log.dirs": value})
    assert info.value.key == "log.dirs"


def test_broker_id_and_node_id():
    assert BrokerConfig({}).broker_id == -1
    assert BrokerConfig({"broker.id": "4"}).broker_id == 4
    assert BrokerConfig({"node.id": "5"}).broker_id == 5
    assert BrokerConfig({"node.id": "5", "broker.id": "5"}).broker_id == 5
    with pytest.raises(ConfigError, match="node.id") as info:
        BrokerConfig({"node.id": "5", "broker.id": "6"})
    assert info.value.key == "broker.id"


def test_follower_pool_falls_back_to_deprecated_thread_pool_size():
    assert BrokerConfig({}).follower_thread_pool_size == 2
    assert BrokerConfig({"remote.log.manager.thread.pool.size": "7"}).follower_thread_pool_size == 7
    both = BrokerConfig({"remote.log.manager.thread.pool.size": "7",
                         "remote.log.manager.follower.thread.pool.size": "3"})
    assert both.follower_thread_pool_size == 3


# ---------------------------------------------------------------- broker validation


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("log.segment.bytes", "13", "at least 14"),
        ("log.segment.bytes", "2147483648", "out of range for a int"),
        ("log.segment.bytes", "1e9", "expected a int"),
        ("log.segment.bytes", "", "expected a int"),
        ("log.index.size.max.bytes", "3", "at least 4"),
        ("log.index.interval.bytes", "-1", "at least 0"),
        ("log.local.retention.ms", "-3", "at least -2"),
        ("log.local.retention.bytes", "-3", "at least -2"),
        ("log.roll.ms", "0", "at least 1"),
        ("log.flush.interval.messages", "0", "at least 1"),
        ("log.preallocate", "yes", "boolean"),
        ("log.message.timestamp.type", "createtime", "one of"),
        ("log.cleanup.policy", "delete,purge", "one of"),
        ("remote.log.storage.system.enable", "1", "boolean"),
        ("remote.log.manager.task.interval.ms", "0", "at least 1"),
        ("remote.log.manager.copier.thread.pool.size", "0", "at least 1"),
        ("remote.log.manager.expiration.thread.pool.size", "-1", "at least 1"),
        ("remote.log.manager.follower.thread.pool.size", "0", "at least 1"),
        ("remote.log.reader.threads", "0", "at least 1"),
        ("remote.log.reader.max.pending.tasks", "0", "at least 1"),
        ("remote.log.index.file.cache.total.size.bytes", "0", "at least 1"),
        ("remote.log.manager.copy.max.bytes.per.second", "0", "at least 1"),
        ("remote.log.manager.fetch.max.bytes.per.second", "9223372036854775808", "out of range"),
        ("remote.log.manager.task.retry.jitter", "0.51", "between 0.0 and 0.5"),
        ("remote.log.manager.task.retry.jitter", "1e999", "finite"),
        ("remote.log.manager.task.retry.jitter", "nan", "expected a double"),
        ("remote.log.manager.task.retry.jitter", "1_0", "expected a double"),
        ("log.segment.bytes", "\u0661\u0662", "expected a int"),
        ("log.flush.scheduler.interval.ms", "-5", "as flush.ms: must be at least 0"),
        ("remote.storage.enable", "true", "requires remote.log.storage.system.enable"),
        ("remote.log.manager.task.retry.jitter", "x", "expected a double"),
        ("remote.log.manager.task.retry.backoff.max.ms", "100", "at least remote.log.manager"),
        ("remote.log.storage.manager.class.name", "not a class", "class name"),
        ("remote.log.storage.manager.impl.prefix", " ", "must not be empty"),
        ("remote.log.metadata.custom.metadata.max.bytes", "-1", "at least 0"),
        ("broker.id", "-2", "at least -1"),
    ],
)
def test_each_broker_validator_names_key_value_and_rule(key, value, rule):
    with pytest.raises(ConfigError) as info:
        BrokerConfig({key: value})
    err = info.value
    assert err.key == key
    assert rule in err.rule
    assert key in str(err) and rule in str(err)
    assert isinstance(err, KafkaEngineError) and isinstance(err, ValueError)


def test_class_names_accept_java_and_python_forms():
    cfg = BrokerConfig({"remote.log.storage.manager.class.name": "engine.remote.fs:FsTier",
                        "remote.log.metadata.manager.class.name": "org.example.My$Inner"})
    assert cfg.get_class("remote.log.storage.manager.class.name") == "engine.remote.fs:FsTier"
    assert cfg.get_class("remote.log.metadata.manager.class.name") == "org.example.My$Inner"


# ---------------------------------------------------------------- prefixes and unused keys


def test_with_prefix_strips_and_unused_reports_unknown_keys():
    props = {
        "log.dirs": "/d",
        "rsm.config.dirs": "/r1,/r2",
        "rsm.config.chunk.size": "4194304",
        "rlmm.config.sync": "true",
        "custom.thing": "x",
    }
    cfg = BrokerConfig(props)
    assert cfg["custom.thing"] == "x"
    assert set(cfg.unused()) == {"rsm.config.dirs", "rsm.config.chunk.size",
                                 "rlmm.config.sync", "custom.thing"}
    rsm = cfg.with_prefix(cfg["remote.log.storage.manager.impl.prefix"])
    assert rsm == {"dirs": "/r1,/r2", "chunk.size": "4194304"}
    assert cfg.with_prefix("rlmm.config.") == {"sync": "true"}
    assert cfg.unused() == {"custom.thing": "x"}


def test_custom_prefix_config_is_honoured():
    cfg = BrokerConfig({"remote.log.storage.manager.impl.prefix": "tier.",
                        "tier.dirs": "/t", "rsm.config.dirs": "/ignored"})
    assert cfg.with_prefix(cfg["remote.log.storage.manager.impl.prefix"]) == {"dirs": "/t"}


def test_broker_config_does_not_alias_the_input_mapping():
    props = {"log.segment.bytes": "100"}
    cfg = BrokerConfig(props)
    props["log.segment.bytes"] = "1"
    assert cfg["log.segment.bytes"] == 100
    assert cfg.originals() == {"log.segment.bytes": "100"}


# ---------------------------------------------------------------- retention synonyms


def test_retention_ms_precedence_ms_over_minutes_over_hours():
    assert BrokerConfig({}).retention_ms == 604800000
    assert BrokerConfig({"log.retention.hours": "1"}).retention_ms == 3600000
    assert BrokerConfig({"log.retention.hours": "1",
                         "log.retention.minutes": "2"}).retention_ms == 120000
    assert BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "2",
                         "log.retention.ms": "3"}).retention_ms == 3


@pytest.mark.parametrize("props", [{"log.retention.ms": "-1"}, {"log.retention.ms": "-5"},
                                   {"log.retention.minutes": "-1"}, {"log.retention.hours": "-1"}])
def test_negative_retention_means_unlimited(props):
    assert BrokerConfig(props).retention_ms == -1


def test_topic_retention_source_names_the_winning_broker_key():
    broker = BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "2"})
    entry = TopicConfig.resolve({}, broker).entry("retention.ms")
    assert (entry.value, entry.source, entry.source_key) == (
        120000, ConfigSource.STATIC_BROKER_CONFIG, "log.retention.minutes")


def test_segment_ms_from_log_roll_hours_and_ms():
    assert TopicConfig.resolve({}, BrokerConfig({"log.roll.hours": "2"}))["segment.ms"] == 7200000
    broker = BrokerConfig({"log.roll.hours": "2", "log.roll.ms": "5"})
    assert TopicConfig.resolve({}, broker)["segment.ms"] == 5


def test_flush_ms_falls_back_to_scheduler_interval():
    broker = BrokerConfig({"log.flush.scheduler.interval.ms": "1000"})
    assert TopicConfig.resolve({}, broker).entry("flush.ms").source_key == (
        "log.flush.scheduler.interval.ms")
    broker = BrokerConfig({"log.flush.scheduler.interval.ms": "1000",
                           "log.flush.interval.ms": "10"})
    assert TopicConfig.resolve({}, broker)["flush.ms"] == 10


# ---------------------------------------------------------------- topic resolution


def test_topic_defaults_with_empty_broker():
    topic = TopicConfig.resolve({}, BrokerConfig({}))
    expected = {
        "segment.bytes": 1073741824, "segment.ms": 604800000, "segment.jitter.ms": 0,
        "segment.index.bytes": 10485760,
        "index.interval.bytes": 4096, "retention.ms": 604800000, "retention.bytes": -1,
        "local.retention.ms": -2, "local.retention.bytes": -2, "remote.storage.enable": False,
        "remote.log.copy.disable": False, "remote.log.delete.on.disable": False,
        "flush.messages": LONG_MAX, "flush.ms": LONG_MAX, "file.delete.delay.ms": 60000,
        "preallocate": False, "max.message.bytes": 1048588,
        "message.timestamp.type": "CreateTime", "cleanup.policy": ["delete"],
    }
    assert {name: entry.value for name, entry in topic.items()} == expected
    assert set(expected) == set(TOPIC_CONFIGS)
    assert all(e.source is ConfigSource.DEFAULT_CONFIG for _, e in topic.items())


@pytest.mark.parametrize(
    ("topic_key", "broker_key", "value", "typed"),
    [
        ("segment.bytes", "log.segment.bytes", "1024", 1024),
        ("segment.index.bytes", "log.index.size.max.bytes", "96", 96),
        ("index.interval.bytes", "log.index.interval.bytes", "1", 1),
        ("retention.bytes", "log.retention.bytes", "1000", 1000),
        ("local.retention.ms", "log.local.retention.ms", "1000", 1000),
        ("local.retention.bytes", "log.local.retention.bytes", "10", 10),
        ("flush.messages", "log.flush.interval.messages", "1", 1),
        ("file.delete.delay.ms", "log.segment.delete.delay.ms", "0", 0),
        ("preallocate", "log.preallocate", "true", True),
        ("max.message.bytes", "message.max.bytes", "2000", 2000),
        ("message.timestamp.type", "log.message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("cleanup.policy", "log.cleanup.policy", "compact,delete", ["compact", "delete"]),
    ],
)
def test_broker_synonym_then_topic_override(topic_key, broker_key, value, typed):
    broker = BrokerConfig({broker_key: value})
    entry = TopicConfig.resolve({}, broker).entry(topic_key)
    assert (entry.value, entry.source, entry.source_key) == (
        typed, ConfigSource.STATIC_BROKER_CONFIG, broker_key)
    default = TOPIC_CONFIGS[topic_key].default
    if isinstance(default, list):
        override = ",".join(default)
    else:
        override = str(default).lower() if isinstance(default, bool) else str(default)
    entry = TopicConfig.resolve({topic_key: override}, broker).entry(topic_key)
    assert entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG and entry.value == default


def test_unknown_topic_override_rejected():
    with pytest.raises(ConfigError) as info:
        TopicConfig.resolve({"retention.msec": "1"}, BrokerConfig({}))
    assert info.value.key == "retention.msec"


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("segment.bytes", "10", "at least 14"),
        ("segment.ms", "0", "at least 1"),
        ("segment.index.bytes", "3", "at least 4"),
        ("index.interval.bytes", "-1", "at least 0"),
        ("retention.ms", "-2", "at least -1"),
        ("retention.bytes", "ten", "expected a long"),
        ("local.retention.ms", "-3", "at least -2"),
        ("local.retention.bytes", "-3", "at least -2"),
        ("flush.messages", "0", "at least 1"),
        ("flush.ms", "-1", "at least 0"),
        ("file.delete.delay.ms", "-1", "at least 0"),
        ("preallocate", "maybe", "boolean"),
        ("max.message.bytes", "-1", "at least 0"),
        ("message.timestamp.type", "Now", "one of"),
        ("cleanup.policy", "delete,purge", "one of"),
        ("remote.storage.enable", "on", "boolean"),
    ],
)
def test_each_topic_validator_names_the_key(key, value, rule):
    with pytest.raises(ConfigError) as info:
        TopicConfig.resolve({key: value}, BrokerConfig({}))
    assert info.value.key == key and rule in info.value.rule


def test_list_values_are_copies():
    broker = BrokerConfig({})
    broker["log.cleanup.policy"].append("compact")
    topic = TopicConfig.resolve({}, broker)
    topic["cleanup.policy"].append("compact")
    assert broker["log.cleanup.policy"] == ["delete"] == topic["cleanup.policy"]
    assert BROKER_CONFIGS["log.cleanup.policy"].default == ["delete"]


# ---------------------------------------------------------------- local retention and tiering

TIERED = {"remote.log.storage.system.enable": "true"}


def test_local_retention_minus_two_resolves_to_total_retention():
    broker = BrokerConfig({**TIERED, "log.retention.hours": "48", "log.retention.bytes": "5000"})
    topic = TopicConfig.resolve({"remote.storage.enable": "true"}, broker)
    assert topic["local.retention.ms"] == -2 and topic["local.retention.bytes"] == -2
    assert topic.local_retention_ms == 48 * 3600000
    assert topic.local_retention_bytes == 5000


def test_local_retention_explicit_value_is_kept():
    broker = BrokerConfig({**TIERED, "log.local.retention.ms": "1000"})
    topic = TopicConfig.resolve({"remote.storage.enable": "true", "local.retention.bytes": "1",
                                 "retention.bytes": "100"}, broker)
    assert topic.local_retention_ms == 1000
    assert topic.local_retention_bytes == 1
    assert topic.entry("local.retention.ms").source_key == "log.local.retention.ms"


def test_broker_level_remote_storage_enable_applies_to_every_topic():
    broker = BrokerConfig({**TIERED, "remote.storage.enable": "true"})
    entry = TopicConfig.resolve({}, broker).entry("remote.storage.enable")
    assert entry.value is True and entry.source is ConfigSource.STATIC_BROKER_CONFIG
    assert TopicConfig.resolve({"remote.storage.enable": "false"}, broker)[
        "remote.storage.enable"] is False


def test_tiered_topic_requires_the_system_enabled():
    with pytest.raises(ConfigError, match="remote.log.storage.system.enable") as info:
        TopicConfig.resolve({"remote.storage.enable": "true"}, BrokerConfig({}))
    assert info.value.key == "remote.storage.enable"


def test_tiered_topic_refuses_compaction():
    with pytest.raises(ConfigError, match="compact"):
        TopicConfig.resolve({"remote.storage.enable": "true", "cleanup.policy": "compact"},
                            BrokerConfig(TIERED))


@pytest.mark.parametrize(
    ("overrides", "key", "rule"),
    [
        ({"retention.ms": "1000", "local.retention.ms": "2000"}, "local.retention.ms", "at most"),
        ({"retention.ms": "1000", "local.retention.ms": "-1"}, "local.retention.ms", "not be -1"),
        ({"retention.bytes": "10", "local.retention.bytes": "11"}, "local.retention.bytes",
         "at most"),
        ({"retention.bytes": "10", "local.retention.bytes": "-1"}, "local.retention.bytes",
         "not be -1"),
        ({"remote.log.copy.disable": "true", "local.retention.ms": "5"}, "local.retention.ms",
         "copy is disabled"),
    ],
)
def test_local_retention_rules_for_tiered_topics(overrides, key, rule):
    overrides = {"remote.storage.enable": "true", **overrides}
    with pytest.raises(ConfigError) as info:
        TopicConfig.resolve(overrides, BrokerConfig(TIERED))
    assert info.value.key == key and rule in info.value.rule


def test_local_retention_rules_allow_unlimited_total_and_untiered_topics():
    broker = BrokerConfig(TIERED)
    unlimited = TopicConfig.resolve({"remote.storage.enable": "true", "retention.ms": "-1",
                                     "local.retention.ms": "-1"}, broker)
    assert unlimited.local_retention_ms == -1
    local_only = TopicConfig.resolve({"retention.ms": "1000", "local.retention.ms": "2000"},
                                     BrokerConfig({}))
    assert local_only["local.retention.ms"] == 2000


def test_topic_overrides_accept_typed_values():
    topic = TopicConfig.resolve({"segment.bytes": 4096, "preallocate": True,
                                 "cleanup.policy": ["delete"]}, BrokerConfig({}))
    assert (topic["segment.bytes"], topic["preallocate"]) == (4096, True)
    with pytest.raises(ConfigError):
        TopicConfig.resolve({"segment.bytes": True}, BrokerConfig({}))


def test_config_types_cover_kafka_kinds():
    kinds = {d.type for d in (*BROKER_CONFIGS.values(), *TOPIC_CONFIGS.values())}
    assert kinds == set(ConfigType)


# ---------------------------------------------------------------- broker files and the store


def _broker_file(tmp_path, text, make_dirs=("d1", "d2", "tier")):
    for d in make_dirs:
        (tmp_path / d).mkdir(exist_ok=True)
    path = tmp_path / "server.properties"
    path.write_text(text.replace("$T", str(tmp_path)))
    return str(path)


_TIERED_FILE = """\
log.dirs=$T/d1,$T/d2
remote.log.storage.system.enable=true
rsm.config.dirs=$T/tier
log.segment.bytes=65536
log.local.retention.bytes=1000
log.retention.ms=86400000
remote.log.manager.task.interval.ms=100
remote.storage.enable=true
listeners=PLAINTEXT://127.0.0.1:9092
num.network.threads=3
log.cleaner.enable=false
"""


def test_load_broker_config_reads_dirs_tiering_and_broker_topic_defaults(tmp_path):
    broker = load_broker_config(_broker_file(tmp_path, _TIERED_FILE))
    assert broker.log_dirs == [str(tmp_path / "d1"), str(tmp_path / "d2")]
    assert broker["remote.log.storage.system.enable"] is True
    assert broker.with_prefix(broker["remote.log.storage.manager.impl.prefix"]) == {
        "dirs": str(tmp_path / "tier")}
    topic = TopicConfig.resolve({}, broker)
    assert topic["segment.bytes"] == 65536 and topic["retention.ms"] == 86400000
    assert topic.local_retention_bytes == 1000 and topic["remote.storage.enable"] is True
    assert topic.entry("local.retention.bytes").source_key == "log.local.retention.bytes"
    # Kafka keys the engine does not use are kept and reported as unused
    assert set(broker.unused()) == {"num.network.threads", "log.cleaner.enable"}
    assert broker["listeners"] == ["PLAINTEXT://127.0.0.1:9092"]  # read by `serve`
    assert "log.cleaner.enable" in KAFKA_BROKER_KEYS_NOT_USED


@pytest.mark.parametrize("line, key, rule", [
    ("log.retention.msx=5", "log.retention.msx", "did you mean 'log.retention.ms'"),
    ("remote.log.manager.task.interval=5", "remote.log.manager.task.interval",
     "unknown broker config"),
    ("retention.ms=1000", "retention.ms", "the broker default is log.retention.ms"),
    ("local.retention.bytes=1", "local.retention.bytes", "is a topic config"),
    ("remote.log.copy.disable=true", "remote.log.copy.disable", "no broker-level default"),
    ("log.segment.bytes=ten", "log.segment.bytes", "expected a int"),
    ("log.local.retention.ms=-3", "log.local.retention.ms", "at least -2"),
    ("remote.log.manager.task.retry.jitter=0.9", "remote.log.manager.task.retry.jitter",
     "between 0.0 and 0.5"),
])
def test_load_broker_config_names_the_key_and_the_file(tmp_path, line, key, rule):
    path = _broker_file(tmp_path, _TIERED_FILE + line + "\n")
    before = sorted(_os.listdir(tmp_path / "d1"))
    with pytest.raises(ConfigError) as info:
        load_broker_config(path)
    assert info.value.key == key and rule in str(info.value)
    assert path in str(info.value) and info.value.file == path
    assert sorted(_os.listdir(tmp_path / "d1")) == before  # nothing touched


def test_load_broker_config_missing_dirs_and_tier(tmp_path):
    path = _broker_file(tmp_path, _TIERED_FILE.replace("$T/d2", "$T/nope/d2"),
                        ("d1", "tier"))
    with pytest.raises(ConfigError) as info:
        load_broker_config(path)
    assert info.value.key == "log.dirs" and "nor does its parent" in str(info.value)
    assert not (tmp_path / "nope").exists()
    path = _broker_file(tmp_path, _TIERED_FILE.replace("$T/tier", "$T/t/x"), ("d1", "d2"))
    with pytest.raises(ConfigError, match="rsm.config.dirs"):
        load_broker_config(path)
    (tmp_path / "file").write_text("")
    path = _broker_file(tmp_path, _TIERED_FILE.replace("$T/tier", "$T/file"), ("d1", "d2"))
    with pytest.raises(ConfigError, match="rsm.config.dirs.*exists but is not a directory"):
        load_broker_config(path)
    # a missing last component is fine (created once every check passed), not by loading
    path = _broker_file(tmp_path, _TIERED_FILE.replace("$T/d2", "$T/new"), ("d1", "tier"))
    assert load_broker_config(path).log_dirs[1] == str(tmp_path / "new")
    assert not (tmp_path / "new").exists()
    path = _broker_file(tmp_path, _TIERED_FILE.replace("rsm.config.dirs=$T/tier\n", ""))
    with pytest.raises(ConfigError) as info:
        load_broker_config(path)
    assert info.value.key == "rsm.config.dirs"
    with pytest.raises(ConfigError, match="cannot read"):
        load_broker_config(str(tmp_path / "absent.properties"))


def test_load_broker_config_tiering_needs_the_system(tmp_path):
    text = _TIERED_FILE.replace("remote.log.storage.system.enable=true",
                                "remote.log.storage.system.enable=false")
    with pytest.raises(ConfigError) as info:
        load_broker_config(_broker_file(tmp_path, text))
    assert info.value.key == "remote.storage.enable"
    assert "remote.log.storage.system.enable=true" in str(info.value)


def test_load_broker_config_custom_prefix_and_plugin_class(tmp_path):
    text = _TIERED_FILE.replace("rsm.config.dirs", "tier.dirs") + (
        "remote.log.storage.manager.impl.prefix=tier.\n")
    broker = load_broker_config(_broker_file(tmp_path, text))
    assert broker.with_prefix("tier.") == {"dirs": str(tmp_path / "tier")}
    # a named RSM class needs no filesystem dirs; its own keys are the plugin's business
    text = _TIERED_FILE.replace("rsm.config.dirs=$T/tier", "rsm.config.bucket=b") + (
        "remote.log.storage.manager.class.name=my.module:MyStorage\n")
    assert load_broker_config(_broker_file(tmp_path, text)).get_class(
        "remote.log.storage.manager.class.name") == "my.module:MyStorage"


def _store(tmp_path):
    broker = load_broker_config(_broker_file(tmp_path, _TIERED_FILE))
    store = TopicConfigStore.of(broker)
    assert store.path == str(tmp_path / "d1" / TOPIC_CONFIG_STORE_FILE)
    return broker, store


def test_topic_config_store_alter_is_durable_and_validated_as_a_whole(tmp_path):
    broker, store = _store(tmp_path)
    assert store.read() == {}
    assert store.alter("orders", broker, add={"retention.ms": "600000",
                                              "local.retention.ms": "60000"}) == {
        "retention.ms": "600000", "local.retention.ms": "60000"}
    assert TopicConfigStore(store.path).overrides("orders") == {
        "local.retention.ms": "60000", "retention.ms": "600000"}
    doc = _json.loads(Path(store.path).read_text())
    assert doc == {"version": 1, "topics": {"orders": {"local.retention.ms": "60000",
                                                       "retention.ms": "600000"}}}
    assert not _os.path.exists(store.path + ".tmp")
    config = store.resolve("orders", broker)
    assert config.local_retention_ms == 60000 and config["segment.bytes"] == 65536
    store.alter("orders", broker, delete=["local.retention.ms", "segment.ms"])  # unset: no-op
    assert store.overrides("orders") == {"retention.ms": "600000"}
    store.alter("orders", broker, delete=["retention.ms"])
    assert store.read() == {}


@pytest.mark.parametrize("add, key, rule", [
    ({"retention.ms": "1000", "local.retention.ms": "2000"}, "local.retention.ms",
     "at most retention.ms"),
    ({"retention.bytes": "1000", "local.retention.bytes": "-1"}, "local.retention.bytes",
     "must not be -1"),
    ({"remote.log.copy.disable": "true"}, "local.retention.bytes",  # broker sets 1000
     "when copy is disabled"),
    ({"remote.storage.enable": "false"}, "remote.storage.enable",
     "remote.log.delete.on.disable=true"),
    ({"cleanup.policy": "compact"}, "remote.storage.enable", "compact"),
    ({"retention.msec": "5"}, "retention.msec", "did you mean 'retention.ms'"),
    ({"segment.bytes": "1"}, "segment.bytes", "at least 14"),
])
def test_topic_config_store_refuses_and_writes_nothing(tmp_path, add, key, rule):
    broker, store = _store(tmp_path)
    store.alter("orders", broker, add={"retention.ms": "600000"})
    before = Path(store.path).read_bytes()
    with pytest.raises(ConfigError) as info:
        store.alter("orders", broker, add=add)
    assert info.value.key == key and rule in str(info.value)
    assert Path(store.path).read_bytes() == before


def test_topic_config_store_disabling_tiering_with_delete_on_disable(tmp_path):
    broker, store = _store(tmp_path)
    after = store.alter("t", broker, add={"remote.storage.enable": "false",
                                          "remote.log.delete.on.disable": "true"})
    assert after["remote.storage.enable"] == "false"
    assert store.resolve("t", broker)["remote.storage.enable"] is False
    assert store.remove_topic("t") and store.read() == {} and not store.remove_topic("t")


def test_topic_config_store_needs_the_system_for_tiering(tmp_path):
    path = _broker_file(tmp_path, "log.dirs=$T/d1\n")
    broker = load_broker_config(path)
    store = TopicConfigStore.of(broker)
    with pytest.raises(ConfigError, match="remote.log.storage.system.enable=true"):
        store.alter("t", broker, add={"remote.storage.enable": "true"})
    assert not _os.path.exists(store.path)


def test_topic_config_store_corrupt_or_stale_file_is_named(tmp_path):
    broker, store = _store(tmp_path)
    Path(store.path).write_text("{not json")
    with pytest.raises(ConfigError) as info:
        store.read()
    assert info.value.file == store.path
    Path(store.path).write_text(_json.dumps({"version": 1, "topics": {
        "t": {"local.retention.ms": "99999999999"}}}))
    with pytest.raises(ConfigError) as info:
        store.resolve("t", broker)  # broker log.retention.ms=86400000 is below it now
    assert info.value.key == "local.retention.ms" and store.path in str(info.value)
    Path(store.path).write_text(_json.dumps({"version": 2, "topics": {}}))
    with pytest.raises(ConfigError, match="version 1"):
        store.read()
