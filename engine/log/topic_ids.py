"""A topic's one topic id, from what its partitions' `partition.metadata` record.

Kafka's controller gives a topic one id and every partition of it records that one. Here the
partitions' files are the only record, so the id is the one they agree on; partitions that
disagree are an error and nothing is rewritten: the remote tier keeps each partition's data
under the id the partition had, so which one is the topic's is for the operator to decide.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.common import TopicPartition, Uuid
from engine.errors import InconsistentTopicIdError

__all__ = ["agreed_topic_id"]


def agreed_topic_id(topic: str, recorded: Mapping[TopicPartition, Uuid | None]) -> Uuid:
    """The id the partitions of `topic` record (`recorded`: partition -> its id, None when
    it has none); a new one when none has one. InconsistentTopicIdError naming each
    partition and its id when they disagree."""
    ids = {i for i in recorded.values() if i is not None}
    if len(ids) <= 1:
        return ids.pop() if ids else Uuid.random()
    shown = {f"{tp.topic}-{tp.partition}": str(i) for tp, i in sorted(recorded.items())}
    raise InconsistentTopicIdError(
        f"the partitions of topic {topic} record different topic ids ("
        + ", ".join(f"{name} has {i}" for name, i in shown.items())
        + "): a topic has one id, and its remote data lies under the one each partition "
        "had; give every partition's partition.metadata the topic's id",
        topic=topic, topic_ids=shown)
