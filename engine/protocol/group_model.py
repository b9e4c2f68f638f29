"""The state of a classic group as the coordinator keeps it (Kafka's ClassicGroup and
ClassicGroupMember), and its durable form: the group metadata entry of the offsets store
(Kafka's GroupMetadataValue), from which a restarted `serve` rebuilds its groups."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field

__all__ = ["COMPLETING", "DEAD", "EMPTY", "PREPARING", "STABLE", "Group", "Member"]

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


def now_ms() -> int:
    return int(time.time() * 1000)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


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

    def to_record(self, protocol: str | None) -> dict:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "subscription": _b64(self.metadata_for(protocol or "")),
                "assignment": _b64(self.assignment)}


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
    #: protocol name -> how many members support it (joins check it in O(protocols))
    protocol_counts: dict = field(default_factory=dict)
    #: member ids with a JoinGroup waiting in the current rebalance
    joining: set = field(default_factory=set)
    #: member ids given with MEMBER_ID_REQUIRED -> when they expire unless used to join
    pending: dict = field(default_factory=dict)
    rebalance: asyncio.Task | None = None
    joined: asyncio.Event = field(default_factory=asyncio.Event)
    empty_since_ms: int = field(default_factory=now_ms)

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self._count(member, 1)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count(member, -1)
            self.joining.discard(member_id)
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        return member

    def set_protocols(self, member: Member, protocols: list) -> None:
        self._count(member, -1)
        member.protocols = protocols
        self._count(member, 1)

    def _count(self, member: Member, by: int) -> None:
        for name in {n for n, _ in member.protocols}:
            self.protocol_counts[name] = self.protocol_counts.get(name, 0) + by
            if not self.protocol_counts[name]:
                del self.protocol_counts[name]

    def supports(self, protocol_type: str, protocols: list) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty protocol list; else
        the type must match and one protocol be supported by every member."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and any(
            self.protocol_counts.get(n, 0) == len(self.members) for n, _ in protocols)

    def choose_protocol(self) -> str:
        """The protocol every member supports that most members list first."""
        candidates = {n for n, c in self.protocol_counts.items() if c == len(self.members)}
        votes: dict[str, int] = {}
        for m in self.members.values():
            first = next(n for n, _ in m.protocols if n in candidates)
            votes[first] = votes.get(first, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    def to_record(self) -> dict:
        """Kafka's GroupMetadataValue: what survives a restart."""
        return {"protocol_type": self.protocol_type, "generation": self.generation,
                "protocol": self.protocol, "leader": self.leader,
                "current_state_timestamp": self.empty_since_ms,
                "members": [m.to_record(self.protocol) for m in self.members.values()]}

    @classmethod
    def from_record(cls, group_id: str, record: dict) -> Group:
        """A loaded group is Stable with its members (each must heartbeat within its
        session timeout from now), or Empty."""
        group = cls(group_id, generation=record["generation"],
                    protocol_type=record["protocol_type"], protocol=record["protocol"],
                    leader=record["leader"], empty_since_ms=record["current_state_timestamp"])
        for m in record["members"]:
            group.add(Member(
                m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                m["session_timeout_ms"], m["rebalance_timeout_ms"], record["protocol_type"],
                [(record["protocol"], base64.b64decode(m["subscription"]))],
                base64.b64decode(m["assignment"])))
        group.state = STABLE if group.members else EMPTY
        return group
