"""The classic group coordinator of `serve` (Kafka's GroupCoordinator, protocol type
"consumer" and any other): FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

This node coordinates every group. A group moves Empty -> PreparingRebalance ->
CompletingRebalance -> Stable as in Kafka:

- a JoinGroup (of a new member, or of a known one) starts a rebalance; it completes when
  every known member has rejoined, or when the longest rebalance timeout passes (members that
  did not rejoin are removed). The first rebalance of an Empty group waits
  `group.initial.rebalance.delay.ms` for more members. JoinGroup v4+ without a member id gets
  MEMBER_ID_REQUIRED and a fresh id to rejoin with. `group.max.size` bounds the members
  (those awaiting a join while a rebalance is prepared): a join past it is answered
  GROUP_MAX_SIZE_REACHED;
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
import concurrent.futures
import logging
import time
import uuid

from engine.protocol import errors as E
from engine.protocol.group_model import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    Group,
    Member,
    now_ms,
)
from engine.protocol.group_offsets import OffsetApis
from engine.protocol.offsets_store import OffsetsStore
from engine.protocol.partition_reader import PartitionReader

__all__ = ["GroupCoordinator"]

log = logging.getLogger(__name__)

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
_KEY_TYPE_GROUP = 0
#: how often session expiry and offset retention are checked
_TICK_S = 0.1


class GroupCoordinator(OffsetApis):
    api_keys = frozenset({FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
                          OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS})

    def __init__(self, config, store: OffsetsStore, reader: PartitionReader) -> None:
        self.store = store
        self.reader = reader
        self.min_session_ms = config["group.min.session.timeout.ms"]
        self.max_session_ms = config["group.max.session.timeout.ms"]
        self.initial_delay_s = config["group.initial.rebalance.delay.ms"] / 1000.0
        self.retention_ms = config["offsets.retention.minutes"] * 60_000
        self.metadata_max_bytes = config["offset.metadata.max.bytes"]
        self.max_size = config["group.max.size"]
        self.groups: dict[str, Group] = {
            group_id: Group.from_record(group_id, record)
            for group_id, record in store.group_metadata().items()}
        # group metadata is written by one thread, in the order the changes were made
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "group-metadata")
        self._ticker: asyncio.Task | None = None
        self._closed = False

    @classmethod
    def open(cls, config, log_dir, reader: PartitionReader) -> GroupCoordinator:
        return cls(config, OffsetsStore(log_dir), reader)

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    def close(self) -> None:
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
        for group in self.groups.values():
            if group.rebalance is not None:
                group.rebalance.cancel()
        self._writer.shutdown(wait=True)
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
            return self._join_error(E.INVALID_GROUP_ID, member_id)
        if not session["allowed"]("read", "group", group_id):
            return self._join_error(E.GROUP_AUTHORIZATION_FAILED, member_id)
        if not self.min_session_ms <= body["session_timeout_ms"] <= self.max_session_ms:
            return self._join_error(E.INVALID_SESSION_TIMEOUT, member_id)
        group = self._group(group_id, create=True)
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        if not self._accepts(group, member_id):
            group.pending.pop(member_id, None)
            if member_id in group.members:
                self._remove_member(group, member_id, "group.max.size reached")
            return self._join_error(E.GROUP_MAX_SIZE_REACHED)
        if not group.supports(body["protocol_type"], protocols):
            return self._join_error(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            return await self._join_new(group, body, v, session, protocols)
        if group.pending.pop(member_id, None) is not None:
            return await self._add_and_join(group, member_id, body, session, protocols)
        error = self._member_error(group, member_id, body["group_instance_id"])
        if error:
            return self._join_error(error, member_id)
        member = group.members[member_id]
        member.last_heartbeat = time.monotonic()
        unchanged = member.protocols == protocols
        if unchanged and (group.state == COMPLETING
                          or (group.state == STABLE and member_id != group.leader)):
            # a retried or needless join: the current generation, no rebalance
            return self._join_answer(group, member, with_members=group.state == COMPLETING)
        group.set_protocols(member, protocols)
        member.session_timeout_ms = body["session_timeout_ms"]
        member.rebalance_timeout_ms = self._rebalance_ms(body)
        return await self._await_join(group, member)

    def _accepts(self, group: Group, member_id: str) -> bool:
        """Kafka's acceptJoiningMember: group.max.size counts the members awaiting a join
        while the group prepares a rebalance (a member given an id with MEMBER_ID_REQUIRED
        is not one yet), the members otherwise; an Empty group takes anyone."""
        if group.state == EMPTY:
            return True
        if group.state == PREPARING:
            return member_id in group.joining or len(group.joining) < self.max_size
        return member_id in group.members or len(group.members) < self.max_size

    async def _join_new(self, group: Group, body, v, session, protocols):
        instance_id = body["group_instance_id"]
        member_id = f"{instance_id or session['client_id'] or 'client'}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                return await self._replace_static(group, old_id, member_id, body, v,
                                                  protocols)
        elif v >= 4:  # a dynamic member must rejoin with this id (KIP-394)
            group.pending[member_id] = time.monotonic() + body["session_timeout_ms"] / 1e3
            return self._join_error(E.MEMBER_ID_REQUIRED, member_id)
        return await self._add_and_join(group, member_id, body, session, protocols)

    @staticmethod
    def _rebalance_ms(body) -> int:
        ms = body["rebalance_timeout_ms"]
        return ms if ms > 0 else body["session_timeout_ms"]

    async def _add_and_join(self, group: Group, member_id: str, body, session, protocols):
        member = Member(member_id, body["group_instance_id"], session["client_id"] or "",
                        f"/{session['peer'][0]}" if session.get("peer") else "",
                        body["session_timeout_ms"], self._rebalance_ms(body),
                        body["protocol_type"], protocols)
        group.add(member)
        if group.leader is None:
            group.leader = member_id
        group.protocol_type = body["protocol_type"]
        return await self._await_join(group, member)

    async def _await_join(self, group: Group, member: Member):
        member.last_heartbeat = time.monotonic()
        if member.join is not None and not member.join.done():
            member.join.set_result(self._join_error(E.REBALANCE_IN_PROGRESS,
                                                    member.member_id))
        member.join = asyncio.get_running_loop().create_future()
        group.joining.add(member.member_id)
        self._prepare_rebalance(group)
        group.joined.set()
        return await member.join

    async def _replace_static(self, group: Group, old_id: str, new_id: str, body, v,
                              protocols):
        """KIP-345: a known group.instance.id joining without a member id takes over its
        old member (which is fenced with FENCED_INSTANCE_ID) and keeps its assignment; in a
        Stable group whose protocol does not change, with no rebalance and the same
        generation."""
        old = group.remove(old_id)
        for fut, answer in ((old.join, self._join_error(E.FENCED_INSTANCE_ID, old_id)),
                            (old.sync, {"error_code": E.FENCED_INSTANCE_ID,
                                        "assignment": b""})):
            if fut is not None and not fut.done():
                fut.set_result(answer)
        member = Member(new_id, old.group_instance_id, old.client_id, old.client_host,
                        body["session_timeout_ms"], self._rebalance_ms(body),
                        old.protocol_type, protocols, old.assignment)
        group.add(member)
        previous_leader = group.leader
        if group.leader == old_id:
            group.leader = new_id
        log.info("Group %s: static member %s replaces member %s with %s", group.group_id,
                 member.group_instance_id, old_id, new_id)
        if group.state == STABLE and group.choose_protocol() == group.protocol:
            await self._persist_now(group)
            if v >= 9:
                return self._join_answer(group, member, with_members=True,
                                         skip_assignment=new_id == group.leader)
            return {**self._join_answer(group, member, with_members=False),
                    "leader": previous_leader}
        return await self._await_join(group, member)

    def _join_answer(self, group: Group, member: Member, *, with_members: bool,
                     skip_assignment: bool = False) -> dict:
        everyone = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "metadata": m.metadata_for(group.protocol or "")}
                    for m in group.members.values()] \
            if with_members and member.member_id == group.leader else []
        return {"error_code": E.NONE, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol,
                "leader": group.leader, "member_id": member.member_id,
                "skip_assignment": skip_assignment, "members": everyone}

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
        while len(group.joining) < len(group.members):
            group.joined.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(group.joined.wait(), left)
            except TimeoutError:
                break
        for mid in [mid for mid in group.members if mid not in group.joining]:
            log.info("Group %s: member %s did not rejoin within the rebalance timeout",
                     group.group_id, mid)
            group.remove(mid)
        group.rebalance = None
        group.joining.clear()
        if not group.members:
            group.generation += 1
            self._become_empty(group)
            return
        group.generation += 1
        group.protocol = group.choose_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        for m in group.members.values():
            m.last_heartbeat = time.monotonic()
            m.sync = None
            if m.join is not None and not m.join.done():
                m.join.set_result(self._join_answer(group, m, with_members=True))
            m.join = None

    def _persist(self, group: Group) -> asyncio.Future:
        """Writes the group's metadata (Stable or Empty) on the writer thread, in order."""
        record = group.to_record() if group.members or group.protocol_type else None
        return asyncio.get_running_loop().run_in_executor(
            self._writer, self.store.store_group_metadata, group.group_id, record)

    async def _persist_now(self, group: Group) -> None:
        await self._persist(group)

    def _become_empty(self, group: Group) -> None:
        group.state = EMPTY
        group.leader = None
        group.protocol = None
        group.empty_since_ms = now_ms()
        self._persist(group)

    def _remove_member(self, group: Group, member_id: str, why: str) -> None:
        member = group.remove(member_id)
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
            group.generation += 1
            self._become_empty(group)
        elif group.members:
            self._prepare_rebalance(group)
        group.joined.set()

    def _check_member(self, group: Group | None, body) -> int:
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = self._member_error(group, body["member_id"], body.get("group_instance_id"))
        if error:
            return error
        return E.ILLEGAL_GENERATION if body["generation_id"] != group.generation else E.NONE

    async def _sync(self, body, v, session, server):
        if not session["allowed"]("read", "group", body["group_id"]):
            return {"error_code": E.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
        group = self._group(body["group_id"])
        error = self._check_member(group, body)
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
            await self._persist(group)  # the assignment is durable before it is answered
            for m in group.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result({"error_code": E.NONE, "assignment": m.assignment})
        result = await member.sync
        return {**out, **result}

    async def _heartbeat(self, body, v, session, server):
        if not session["allowed"]("read", "group", body["group_id"]):
            return {"error_code": E.GROUP_AUTHORIZATION_FAILED}
        group = self._group(body["group_id"])
        error = self._check_member(group, body)
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
        rows = [{"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                 "error_code": self._leave_one(group, m["member_id"],
                                               m.get("group_instance_id"))}
                for m in leaving]
        if v < 3:
            return {"error_code": rows[0]["error_code"]}
        return {"error_code": E.NONE, "members": rows}

    def _leave_one(self, group: Group | None, member_id: str, instance_id: str | None) -> int:
        """Kafka's LeaveGroup of one member: by instance id alone (an admin removing a
        static member), a pending member, or a member validated as for any request."""
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if not member_id:
            if instance_id is None or instance_id not in group.static_members:
                return E.UNKNOWN_MEMBER_ID
            member_id = group.static_members[instance_id]
        elif group.pending.pop(member_id, None) is not None:
            return E.NONE
        else:
            error = self._member_error(group, member_id, instance_id)
            if error:
                return error
        self._remove_member(group, member_id, "left the group")
        return E.NONE

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
