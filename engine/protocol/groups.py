"""The classic group coordinator of `serve` (Kafka's GroupCoordinator, protocol type
"consumer" and any other): FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

This node coordinates every group. A group moves Empty -> PreparingRebalance ->
CompletingRebalance -> Stable as in Kafka:

- a JoinGroup (of a new member, or of a known one) starts a rebalance; it completes when
  every known member has rejoined, or when the longest rebalance timeout passes (members that
  did not rejoin are removed). The first rebalance of an Empty group waits
  `group.initial.rebalance.delay.ms` for more members. JoinGroup v4+ without a member id gets
  MEMBER_ID_REQUIRED and a fresh id to rejoin with;
- the protocol is the one every member supports that most members list first; the leader
  (the first member to join) gets every member's metadata, computes the assignment and
  sends it in its SyncGroup; the others' SyncGroup waits for it;
- a member whose heartbeats stop for its session timeout (bounded by
  `group.min/max.session.timeout.ms`) is removed and the group rebalances; heartbeats during a
  rebalance answer REBALANCE_IN_PROGRESS so members rejoin;
- offsets are committed by the current generation's members, or with generation -1 by a
  client outside the group while it is Empty; they are written to the OffsetsStore (fsynced)
  before the answer, and an Empty group's offsets expire `offsets.retention.minutes` after
  its last commit.

Everything runs on the server's event loop; only the store's writes go to the I/O threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from engine.protocol import errors as E
from engine.protocol.offsets_store import CommittedOffset, OffsetsStore

__all__ = ["GroupCoordinator"]

log = logging.getLogger(__name__)

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
_KEY_TYPE_GROUP = 0
#: how often session expiry and offset retention are checked
_TICK_S = 0.1


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list  # [(name, metadata bytes)]
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict = field(default_factory=dict)
    #: group.instance.id -> member id of the static members
    static_members: dict = field(default_factory=dict)
    #: member ids given with MEMBER_ID_REQUIRED -> when they expire unless used to join
    pending: dict = field(default_factory=dict)
    rebalance: asyncio.Task | None = None
    joined: asyncio.Event = field(default_factory=asyncio.Event)
    empty_since_ms: int = field(default_factory=_now_ms)


class GroupCoordinator:
    api_keys = frozenset({FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
                          OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS})

    def __init__(self, config, store: OffsetsStore, log_manager) -> None:
        self.store = store
        self.log_manager = log_manager
        self.min_session_ms = config["group.min.session.timeout.ms"]
        self.max_session_ms = config["group.max.session.timeout.ms"]
        self.initial_delay_s = config["group.initial.rebalance.delay.ms"] / 1000.0
        self.retention_ms = config["offsets.retention.minutes"] * 60_000
        self.metadata_max_bytes = config["offset.metadata.max.bytes"]
        self.groups: dict[str, Group] = {}
        self._ticker: asyncio.Task | None = None
        self._closed = False

    @classmethod
    def open(cls, config, log_dir, log_manager) -> GroupCoordinator:
        return cls(config, OffsetsStore(log_dir), log_manager)

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    def close(self) -> None:
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
        for group in self.groups.values():
            if group.rebalance is not None:
                group.rebalance.cancel()
        self.store.close()

    async def handle(self, req, session: dict, server):
        body, v = req.body, req.api_version
        handler = {FIND_COORDINATOR: self._find_coordinator, JOIN_GROUP: self._join,
                   SYNC_GROUP: self._sync, HEARTBEAT: self._heartbeat,
                   LEAVE_GROUP: self._leave, OFFSET_COMMIT: self._commit,
                   OFFSET_FETCH: self._fetch_offsets, LIST_GROUPS: self._list,
                   DESCRIBE_GROUPS: self._describe}[req.api_key]
        return await handler(body, v, session, server)

    # -- FindCoordinator ---------------------------------------------------------------------

    async def _find_coordinator(self, body, v, session, server):
        ep = server.endpoints[session["listener"]]
        allowed = session["allowed"]

        def error(key):
            if body["key_type"] != _KEY_TYPE_GROUP:
                return E.COORDINATOR_NOT_AVAILABLE
            return E.NONE if allowed("describe", "group", key) else E.GROUP_AUTHORIZATION_FAILED

        if v < 4:
            return {"error_code": error(body["key"]), "error_message": None,
                    "node_id": ep.node_id, "host": ep.host, "port": ep.port}
        return {"coordinators": [{"key": key, "node_id": ep.node_id, "host": ep.host,
                                  "port": ep.port, "error_code": error(key),
                                  "error_message": None}
                                 for key in body["coordinator_keys"]]}

    # -- membership --------------------------------------------------------------------------

    def _group(self, group_id: str, create: bool = False) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id)
        return group

    @staticmethod
    def _join_error(code: int, member_id: str = "") -> dict:
        return {"error_code": code, "generation_id": -1, "protocol_name": None,
                "leader": "", "member_id": member_id, "members": []}

    async def _join(self, body, v, session, server):
        group_id, member_id = body["group_id"], body["member_id"]
        if not group_id:
            return self._join_error(E.INVALID_GROUP_ID)
        if not session["allowed"]("read", "group", group_id):
            return self._join_error(E.GROUP_AUTHORIZATION_FAILED)
        if not self.min_session_ms <= body["session_timeout_ms"] <= self.max_session_ms:
            return self._join_error(E.INVALID_SESSION_TIMEOUT)
        group = self._group(group_id, create=True)
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        if not protocols or (group.members and body["protocol_type"] != group.protocol_type):
            return self._join_error(E.INCONSISTENT_GROUP_PROTOCOL)
        names = {n for n, _ in protocols}
        if group.members and not any(all(n in {x for x, _ in m.protocols} for m in
                                         group.members.values()) for n in names):
            return self._join_error(E.INCONSISTENT_GROUP_PROTOCOL)
        pending = group.pending.pop(member_id, None) if member_id else None
        if member_id and member_id not in group.members and pending is None:
            return self._join_error(E.UNKNOWN_MEMBER_ID, member_id)
        if not member_id:
            member_id = f"{session['client_id'] or 'client'}-{uuid.uuid4()}"
            if v >= 4:  # the client must rejoin with this id (KIP-394)
                group.pending[member_id] = time.monotonic() + body["session_timeout_ms"] / 1e3
                return self._join_error(E.MEMBER_ID_REQUIRED, member_id)
        rebalance_ms = body["rebalance_timeout_ms"]
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(
                member_id, body["group_instance_id"], session["client_id"] or "",
                f"/{session['peer'][0]}" if session.get("peer") else "",
                body["session_timeout_ms"],
                rebalance_ms if rebalance_ms > 0 else body["session_timeout_ms"],
                body["protocol_type"], protocols)
        else:
            member.protocols = protocols
            member.session_timeout_ms = body["session_timeout_ms"]
        if group.leader is None:
            group.leader = member_id
        group.protocol_type = body["protocol_type"]
        member.last_heartbeat = time.monotonic()
        if member.join is not None and not member.join.done():
            member.join.set_result(self._join_error(E.REBALANCE_IN_PROGRESS, member_id))
        member.join = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group)
        group.joined.set()
        return await member.join

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == PREPARING:
            return
        for m in group.members.values():  # waiting syncs of the old generation end
            if m.sync is not None and not m.sync.done():
                m.sync.set_result({"error_code": E.REBALANCE_IN_PROGRESS, "assignment": b""})
        delay = self.initial_delay_s if group.state == EMPTY else 0.0
        group.state = PREPARING
        group.rebalance = asyncio.get_running_loop().create_task(
            self._complete_rebalance(group, delay))

    async def _complete_rebalance(self, group: Group, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        deadline = time.monotonic() + timeout / 1000.0
        while any(m.join is None for m in group.members.values()):
            group.joined.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(group.joined.wait(), left)
            except TimeoutError:
                break
        for mid in [mid for mid, m in group.members.items() if m.join is None]:
            log.info("Group %s: member %s did not rejoin within the rebalance timeout",
                     group.group_id, mid)
            del group.members[mid]
        group.rebalance = None
        if not group.members:
            self._become_empty(group)
            return
        group.generation += 1
        group.protocol = self._choose_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        everyone = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "metadata": m.metadata_for(group.protocol)}
                    for m in group.members.values()]
        for m in group.members.values():
            m.last_heartbeat = time.monotonic()
            m.sync = None
            if m.join is not None and not m.join.done():
                m.join.set_result({
                    "error_code": E.NONE, "generation_id": group.generation,
                    "protocol_type": group.protocol_type, "protocol_name": group.protocol,
                    "leader": group.leader, "member_id": m.member_id,
                    "members": everyone if m.member_id == group.leader else []})
            m.join = None

    @staticmethod
    def _choose_protocol(group: Group) -> str:
        candidates = set.intersection(*({n for n, _ in m.protocols}
                                        for m in group.members.values()))
        votes: dict[str, int] = {}
        for m in group.members.values():
            first = next(n for n, _ in m.protocols if n in candidates)
            votes[first] = votes.get(first, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    def _become_empty(self, group: Group) -> None:
        group.state = EMPTY
        group.leader = None
        group.protocol = None
        group.empty_since_ms = _now_ms()

    def _remove_member(self, group: Group, member_id: str, why: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        log.info("Group %s: member %s removed (%s)", group.group_id, member_id, why)
        for fut in (member.join, member.sync):
            if fut is not None and not fut.done():
                fut.set_result(self._join_error(E.UNKNOWN_MEMBER_ID, member_id)
                               if fut is member.join
                               else {"error_code": E.UNKNOWN_MEMBER_ID, "assignment": b""})
        if group.leader == member_id:
            group.leader = next(iter(group.members), None)
        if not group.members and group.state != PREPARING:
            self._become_empty(group)
            group.generation += 1
        elif group.members:
            self._prepare_rebalance(group)
        group.joined.set()

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

    def _check_member(self, group: Group | None, member_id: str, generation: int) -> int:
        if group is None or member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    async def _sync(self, body, v, session, server):
        if not session["allowed"]("read", "group", body["group_id"]):
            return {"error_code": E.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
        group = self._group(body["group_id"])
        error = self._check_member(group, body["member_id"], body["generation_id"])
        out = {"protocol_type": group.protocol_type if group else None,
               "protocol_name": group.protocol if group else None}
        if error:
            return {**out, "error_code": error, "assignment": b""}
        member = group.members[body["member_id"]]
        member.last_heartbeat = time.monotonic()
        if group.state == PREPARING:
            return {**out, "error_code": E.REBALANCE_IN_PROGRESS, "assignment": b""}
        if group.state == STABLE:
            return {**out, "error_code": E.NONE, "assignment": member.assignment}
        member.sync = asyncio.get_running_loop().create_future()
        if member.member_id == group.leader:
            given = {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]}
            group.state = STABLE
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result({"error_code": E.NONE, "assignment": m.assignment})
        result = await member.sync
        return {**out, **result}

    async def _heartbeat(self, body, v, session, server):
        if not session["allowed"]("read", "group", body["group_id"]):
            return {"error_code": E.GROUP_AUTHORIZATION_FAILED}
        group = self._group(body["group_id"])
        error = self._check_member(group, body["member_id"], body["generation_id"])
        if error:
            return {"error_code": error}
        group.members[body["member_id"]].last_heartbeat = time.monotonic()
        return {"error_code": E.REBALANCE_IN_PROGRESS if group.state == PREPARING
                else E.NONE}

    async def _leave(self, body, v, session, server):
        if not session["allowed"]("read", "group", body["group_id"]):
            return {"error_code": E.GROUP_AUTHORIZATION_FAILED, "members": []}
        group = self._group(body["group_id"])
        leaving = ([{"member_id": body["member_id"], "group_instance_id": None}] if v < 3
                   else body["members"])
        rows = []
        for m in leaving:
            known = group is not None and m["member_id"] in group.members
            if known:
                self._remove_member(group, m["member_id"], "left the group")
            rows.append({"member_id": m["member_id"],
                         "group_instance_id": m.get("group_instance_id"),
                         "error_code": E.NONE if known else E.UNKNOWN_MEMBER_ID})
        if v < 3:
            return {"error_code": rows[0]["error_code"]}
        return {"error_code": E.NONE, "members": rows}

    async def _tick(self) -> None:
        """Session expiry and offset retention, every _TICK_S until close()."""
        last_retention = 0.0
        while not self._closed:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member_id in [m for m, until in group.pending.items() if until < now]:
                    del group.pending[member_id]
                for member in list(group.members.values()):
                    if member.join is not None:
                        continue  # waiting in a rebalance: alive
                    if now - member.last_heartbeat > member.session_timeout_ms / 1000.0:
                        self._remove_member(group, member.member_id,
                                            "session timeout expired")
            if now - last_retention >= 1.0:
                last_retention = now
                await self._expire_offsets()

    async def _expire_offsets(self) -> None:
        now_ms = _now_ms()
        for group_id in self.store.groups():
            group = self.groups.get(group_id)
            if group is not None and group.state != EMPTY:
                continue
            offsets = self.store.get(group_id)
            newest = max((c.commit_ms for c in offsets.values()), default=0)
            since = max(newest, group.empty_since_ms if group is not None else 0)
            if now_ms - since > self.retention_ms:
                log.info("Group %s: offsets expired (offsets.retention.minutes)", group_id)
                await asyncio.get_running_loop().run_in_executor(
                    None, self.store.delete_group, group_id)
                if group is not None and not group.members:
                    self.groups.pop(group_id, None)

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
        now = _now_ms()
        rows, accepted = [], {}
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                code = error
                if not code and not allowed("read", "topic", t["name"]):
                    code = E.TOPIC_AUTHORIZATION_FAILED
                if not code and self.log_manager.get_log(t["name"],
                                                         p["partition_index"]) is None:
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
            rows.append({
                "error_code": E.NONE, "group_id": group_id, "group_state": g.state,
                "protocol_type": g.protocol_type or "", "protocol_data": g.protocol or "",
                "members": [{"member_id": m.member_id,
                             "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata_for(g.protocol or ""),
                             "member_assignment": m.assignment}
                            for m in g.members.values()]})
        return {"groups": rows}
