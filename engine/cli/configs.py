"""`configs`: durable per-topic overrides, in the manner of kafka-configs.sh.

    python -m engine configs --config FILE --entity-name T --alter --add-config k=v[,k=v]
    python -m engine configs --config FILE --entity-name T --alter --delete-config k[,k]
    python -m engine configs --config FILE [--entity-name T] --describe [--all] [--json]

Values with commas go in brackets, as in kafka-configs.sh: `cleanup.policy=[delete]`.
Changes are validated with TopicConfig's rules against the broker file and written to the
topic-config store (`topic-config-overrides.json` in the first log dir, see
engine.config.TopicConfigStore); `run` applies them at start and picks up later changes
while it runs, other commands apply them when they open the logs. The topic must exist
(a `<topic>-<partition>` directory in a log dir), as kafka-configs.sh requires. No log is
opened: this command works beside a running `run`.
"""

from __future__ import annotations

import json

from engine.cli._broker import check_topic, cli_errors, existing_topics
from engine.config import ConfigError, TopicConfigStore, load_broker_config
from engine.errors import UnknownTopicOrPartitionError

__all__ = ["parse_add_config", "run"]


def parse_add_config(text: str) -> dict[str, str]:
    """`k1=v1,k2=[a,b],k3=v3` -> {k1: v1, k2: "a,b", k3: v3} (kafka-configs.sh syntax)."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise ConfigError(None, text[i:], "expected key=value in --add-config")
        key = text[i:eq].strip()
        j = eq + 1
        if j < n and text[j] == "[":
            close = text.find("]", j)
            if close < 0:
                raise ConfigError(key, text[j:], "unclosed [ in --add-config")
            value, j = text[j + 1:close], close + 1
            if j < n and text[j] != ",":
                raise ConfigError(key, text[eq + 1:], "expected , after ]")
        else:
            comma = text.find(",", j)
            comma = n if comma < 0 else comma
            value, j = text[j:comma], comma
        if not key:
            raise ConfigError(None, text, "empty key in --add-config")
        out[key] = value.strip()
        i = j + 1
    return out


def _describe(store: TopicConfigStore, broker, topics: list[str], show_all: bool,
              as_json: bool) -> None:
    stored = store.read()
    result: dict[str, dict] = {}
    for topic in topics:
        overrides = stored.get(topic, {})
        if show_all:
            config = store.resolve(topic, broker)
            result[topic] = {name: {"value": entry.value, "source": entry.source.name,
                                    "source_key": entry.source_key}
                             for name, entry in config.items()}
        else:
            result[topic] = overrides
    if as_json:
        print(json.dumps(result, sort_keys=True))
        return
    for topic, entries in result.items():
        print(f"{'All' if show_all else 'Dynamic'} configs for topic {topic} are:")
        for name, entry in entries.items():
            if show_all:
                value = entry["value"]
                if isinstance(value, list):
                    value = ",".join(value)
                elif isinstance(value, bool):
                    value = str(value).lower()
                source = entry["source"] + (f":{entry['source_key']}"
                                            if entry["source_key"] else "")
                print(f"  {name}={value} ({source})")
            else:
                print(f"  {name}={entry}")


@cli_errors
def run(args) -> int:
    broker = load_broker_config(args.config)
    store = TopicConfigStore.of(broker)
    topics = existing_topics(broker)
    if args.entity_name is not None:
        check_topic(args.entity_name)
        if args.entity_name not in topics:
            raise UnknownTopicOrPartitionError(
                f"topic {args.entity_name!r} does not exist in log dirs "
                f"{', '.join(broker.log_dirs)}", topic=args.entity_name)
    if args.alter == args.describe:
        raise ConfigError(None, None, "give exactly one of --alter and --describe")
    if args.describe:
        names = [args.entity_name] if args.entity_name else sorted(set(topics) |
                                                                   set(store.read()))
        _describe(store, broker, names, args.all, args.json)
        return 0
    if args.entity_name is None:
        raise ConfigError(None, None, "--alter needs --entity-name TOPIC")
    add = parse_add_config(args.add_config) if args.add_config else {}
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not add and not delete:
        raise ConfigError(None, None, "--alter needs --add-config or --delete-config")
    try:
        store.alter(args.entity_name, broker, add=add, delete=delete)
    except ConfigError as exc:
        raise ConfigError(exc.key, exc.value, f"topic {args.entity_name!r}: {exc.rule}",
                          file=exc.file) from None
    print(f"Completed updating config for topic {args.entity_name}.")
    return 0
