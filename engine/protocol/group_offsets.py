"""OffsetCommit, OffsetFetch, ListGroups and DescribeGroups of the classic group
coordinator, and the expiry of committed offsets (`offsets.retention.minutes`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from engine.errors import KafkaStorageError
from engine.protocol import errors as E
from engine.protocol.group_model import COMPLETING, DEAD, EMPTY, STABLE, Group, now_ms
from engine.protocol.offsets_store import CommittedOffset, OffsetsStore
from engine.protocol.partition_reader import PartitionReader

__all__ = ["OffsetApis"]

log = logging.getLogger(__name__)


class OffsetApis:
    """The offsets half of GroupCoordinator (a mixin: it uses the coordinator's store,
    groups and configs)."""

    store: OffsetsStore
    groups: dict[str, Group]
    #: the partitions offsets may be committed for
    reader: PartitionReader
    retention_ms: int
    metadata_max_bytes: int

    _group: Callable[..., Group | None]

    @staticmethod
    def _member_error(group: Group, member_id: str, instance_id: str | None) -> int:
        """Kafka's validateMember: a static member's request with another member id than
        the one its instance id now maps to is fenced."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
        return E.NONE if member_id in group.members else E.UNKNOWN_MEMBER_ID

    async def _expire_offsets(self) -> None:
        """Kafka's offset expiry: a group that never had members (protocol type unset)
        loses each offset `offsets.retention.minutes` after its commit; a group with a
        protocol type loses all its offsets that long after it became Empty; offsets of a
        group with members do not expire."""
        now = now_ms()
        for group_id in self.store.groups():
            group = self.groups.get(group_id)
            offsets = self.store.get(group_id)
            if group is None or group.protocol_type is None:
                old = [tp for tp, c in offsets.items() if now - c.commit_ms > self.retention_ms]
            elif group.state == EMPTY and now - group.empty_since_ms > self.retention_ms:
                old = list(offsets)
            else:
                continue
            if not old:
                continue
            log.info("Group %s: %d offsets expired (offsets.retention.minutes)", group_id,
                     len(old))
            await asyncio.get_running_loop().run_in_executor(
                None, self.store.delete_offsets, group_id, old)
            if group is not None and not group.members and not self.store.get(group_id):
                self.groups.pop(group_id, None)
                await asyncio.get_running_loop().run_in_executor(
                    None, self.store.store_group_metadata, group_id, None)


    # -- offsets -----------------------------------------------------------------------------

    async def _commit(self, body, v, session, server):
        group_id = body["group_id"]
        group = self._group(group_id)
        allowed = session["allowed"]
        if not group_id:
            error = E.INVALID_GROUP_ID
        elif not allowed("read", "group", group_id):
            error = E.GROUP_AUTHORIZATION_FAILED
        else:
            error = self._commit_error(group, body, v)
        now = now_ms()
        rows, accepted = [], {}
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                code = error
                if not code and not allowed("read", "topic", t["name"]):
                    code = E.TOPIC_AUTHORIZATION_FAILED
                if not code and not self._partition_exists(t["name"], p["partition_index"]):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                if not code and self._metadata_too_large(p["committed_metadata"]):
                    code = E.OFFSET_METADATA_TOO_LARGE
                if not code:
                    accepted[(t["name"], p["partition_index"])] = CommittedOffset(
                        p["committed_offset"], p["committed_leader_epoch"],
                        p["committed_metadata"], now)
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            rows.append({"name": t["name"], "partitions": parts})
        if accepted:
            await server.run_blocking(self.store.commit, group_id, accepted)
            group = self._group(group_id, create=True)
            if group.state == EMPTY:
                group.empty_since_ms = now
        return {"topics": rows}

    def _partition_exists(self, topic: str, partition: int) -> bool:
        """Kafka checks a committed partition against its metadata, not its log: a partition
        whose log dir is offline still exists, and its group's commits are kept (they live
        in the coordinator's store, not in that log)."""
        try:
            return self.reader.log_offsets(topic, partition) is not None
        except KafkaStorageError:
            return True

    def _metadata_too_large(self, metadata: str | None) -> bool:
        # Kafka compares String.length(): UTF-16 code units
        return metadata is not None and \
            len(metadata.encode("utf-16-le", "surrogatepass")) // 2 > self.metadata_max_bytes

    def _commit_error(self, group: Group | None, body, v: int) -> int:
        """Kafka's validation of an OffsetCommit: generation -1 commits from outside the
        group while it is Empty (or has no state); a member commits with its generation in
        Stable and PreparingRebalance (so commits of revoke callbacks land), and is told
        REBALANCE_IN_PROGRESS only in CompletingRebalance, before it has its assignment."""
        generation, member_id = body["generation_id_or_member_epoch"], body["member_id"]
        instance_id = body.get("group_instance_id")
        if group is None:
            if generation < 0:
                return E.NONE
            return E.GROUP_ID_NOT_FOUND if v >= 9 else E.ILLEGAL_GENERATION
        if group.state == DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state == EMPTY:
            return E.NONE
        if generation >= 0 or member_id or instance_id is not None:
            error = self._member_error(group, member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        elif group.state != EMPTY:
            return E.UNKNOWN_MEMBER_ID
        return E.REBALANCE_IN_PROGRESS if group.state == COMPLETING else E.NONE

    def _offsets_of(self, group_id: str, topics, allowed) -> list:
        stored = self.store.get(group_id)
        if topics is None:
            names: dict[str, list[int]] = {}
            for (t, p) in sorted(stored):
                if allowed("describe", "topic", t):
                    names.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in names.items()]
        out = []
        for t in topics:
            parts = []
            permitted = allowed("describe", "topic", t["name"])
            for p in t["partition_indexes"]:
                c = stored.get((t["name"], p)) if permitted else None
                parts.append({"partition_index": p,
                              "committed_offset": c.offset if c else -1,
                              "committed_leader_epoch": c.leader_epoch if c else -1,
                              "metadata": (c.metadata if c else "") or "",
                              "error_code": E.NONE if permitted
                              else E.TOPIC_AUTHORIZATION_FAILED})
            out.append({"name": t["name"], "partitions": parts})
        return out

    async def _fetch_offsets(self, body, v, session, server):
        allowed = session["allowed"]

        def one(group_id, topics):
            if not allowed("describe", "group", group_id):
                return [], E.GROUP_AUTHORIZATION_FAILED
            return self._offsets_of(group_id, topics, allowed), E.NONE

        if v < 8:
            topics, error = one(body["group_id"], body["topics"])
            if error and v < 2:  # no top-level error before v2: on every partition asked
                topics = [{"name": t["name"], "partitions": [
                    {"partition_index": p, "committed_offset": -1, "error_code": error}
                    for p in t["partition_indexes"]]} for t in body["topics"] or ()]
            return {"topics": topics, "error_code": error}
        out = []
        for g in body["groups"]:
            topics, error = one(g["group_id"], g["topics"])
            out.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
        return {"groups": out}

    # -- ListGroups, DescribeGroups ------------------------------------------------------------

    def _known_groups(self) -> dict[str, Group]:
        known = dict(self.groups)
        for group_id in self.store.groups():
            known.setdefault(group_id, Group(group_id))
        return known

    async def _list(self, body, v, session, server):
        states = set(body["states_filter"] or ())
        types = {t.lower() for t in body["types_filter"] or ()}
        rows = []
        for group_id, g in sorted(self._known_groups().items()):
            if (states and g.state not in states) or (types and "classic" not in types):
                continue
            if not session["allowed"]("describe", "group", group_id):
                continue
            rows.append({"group_id": group_id, "protocol_type": g.protocol_type or "",
                         "group_state": g.state, "group_type": "classic"})
        return {"error_code": E.NONE, "groups": rows}

    async def _describe(self, body, v, session, server):
        known = self._known_groups()
        rows = []
        for group_id in body["groups"]:
            g = known.get(group_id)
            if not session["allowed"]("describe", "group", group_id):
                rows.append({"error_code": E.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                             "group_state": "", "protocol_type": "", "protocol_data": "",
                             "members": []})
                continue
            if g is None:
                rows.append({"error_code": E.NONE, "group_id": group_id, "group_state": DEAD,
                             "protocol_type": "", "protocol_data": "", "members": []})
                continue
            stable = g.state == STABLE  # Kafka shows protocol and metadata only then
            rows.append({
                "error_code": E.NONE, "group_id": group_id, "group_state": g.state,
                "protocol_type": g.protocol_type or "",
                "protocol_data": (g.protocol or "") if stable else "",
                "members": [{"member_id": m.member_id,
                             "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata_for(g.protocol or "")
                             if stable else b"",
                             "member_assignment": m.assignment if stable else b""}
                            for m in g.members.values()]})
        return {"groups": rows}
