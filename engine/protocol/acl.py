"""Topic and group ACLs of `serve`, with the rules of Kafka's StandardAuthorizer.

Authorization is on when `authorizer.class.name` is set (as in Kafka: without an authorizer
everything is allowed). ACLs come from `engine.acls.file`, a JSON list of bindings:

    [{"principal": "User:alice", "resource_type": "topic", "resource_name": "orders",
      "pattern_type": "literal", "operation": "read", "permission_type": "allow"}]

- `principal` `User:*` matches everyone; `resource_name` `*` (literal) every resource;
  `pattern_type` `prefixed` matches names starting with it;
- resource types topic, group and cluster (named `kafka-cluster`); operations as Kafka's
  AclOperation names in lower case (read, write, create, delete, alter, describe,
  cluster_action, describe_configs, alter_configs, idempotent_write, all); DESCRIBE is
  implied by READ, WRITE, DELETE and ALTER (DESCRIBE_CONFIGS by ALTER_CONFIGS), as in Kafka;
- a matching DENY wins over any ALLOW; `super.users` (`User:a;User:b`) are always allowed;
  with no ACL on a resource at all, `allow.everyone.if.no.acl.found` decides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.config import ConfigError

__all__ = ["CLUSTER_NAME", "Authorizer", "authorized_operations"]

#: AclOperation codes (org.apache.kafka.common.acl.AclOperation), for the bitfields of
#: authorized operations
OPERATION_CODES = {"all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7,
                   "describe": 8, "cluster_action": 9, "describe_configs": 10,
                   "alter_configs": 11, "idempotent_write": 12}
#: the operations each resource type has (Kafka's AclEntry.supportedOperations)
SUPPORTED_OPERATIONS = {
    "topic": ("read", "write", "create", "describe", "delete", "alter", "describe_configs",
              "alter_configs"),
    "group": ("read", "describe", "delete", "describe_configs", "alter_configs"),
    "cluster": ("create", "cluster_action", "describe_configs", "alter_configs",
                "idempotent_write", "alter", "describe"),
}
#: the name of the cluster resource (Kafka's CLUSTER_NAME)
CLUSTER_NAME = "kafka-cluster"
_OPERATIONS = tuple(OPERATION_CODES)
_IMPLIES = {"describe": {"read", "write", "delete", "alter"},
            "describe_configs": {"alter_configs"}}
_TYPES = ("topic", "group", "cluster")


@dataclass(frozen=True)
class Acl:
    principal: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str
    permission_type: str

    def matches_resource(self, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == "prefixed":
            return name.startswith(self.resource_name)
        return self.resource_name in ("*", name)

    def matches_operation(self, operation: str) -> bool:
        return self.operation in ("all", operation) or (
            self.permission_type == "allow" and self.operation in _IMPLIES.get(operation, ()))


def _parse(entry, path: str) -> Acl:
    try:
        acl = Acl(entry["principal"], entry["resource_type"].lower(),
                  entry["resource_name"], entry.get("pattern_type", "literal").lower(),
                  entry["operation"].lower(), entry.get("permission_type", "allow").lower())
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError("engine.acls.file", path, f"bad ACL {entry!r}: {exc}") from None
    if (acl.resource_type not in _TYPES or acl.operation not in _OPERATIONS
            or acl.pattern_type not in ("literal", "prefixed")
            or acl.permission_type not in ("allow", "deny") or ":" not in acl.principal):
        raise ConfigError("engine.acls.file", path, f"bad ACL {entry!r}: resource_type in "
                          f"{_TYPES}, operation in {_OPERATIONS}, pattern_type literal or "
                          "prefixed, permission_type allow or deny, principal Type:name")
    return acl


class Authorizer:
    """`allowed(principal, operation, resource_type, name)`; thread-safe (immutable)."""

    def __init__(self, acls: list[Acl], super_users: frozenset[str],
                 allow_if_no_acl: bool) -> None:
        self.acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    @classmethod
    def from_config(cls, config) -> Authorizer | None:
        if not config["authorizer.class.name"]:
            return None
        acls = []
        path = config["engine.acls.file"]
        if path:
            try:
                with open(path, "rb") as f:
                    entries = json.load(f)
            except FileNotFoundError as exc:
                raise ConfigError("engine.acls.file", path,
                                  f"[Errno {exc.errno}] {exc.strerror}") from None
            except ValueError as exc:
                raise ConfigError("engine.acls.file", path, f"not JSON: {exc}") from None
            if not isinstance(entries, list):
                raise ConfigError("engine.acls.file", path, "expected a JSON list of ACLs")
            acls = [_parse(e, path) for e in entries]
        supers = frozenset(u.strip() for u in (config["super.users"] or "").split(";")
                           if u.strip())
        return cls(acls, supers, config["allow.everyone.if.no.acl.found"])

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        on_resource = [a for a in self.acls if a.matches_resource(resource_type, name)]
        if not on_resource:
            return self.allow_if_no_acl
        mine = [a for a in on_resource if a.principal in (principal, "User:*")
                and a.matches_operation(operation)]
        if any(a.permission_type == "deny" for a in mine):
            return False
        return any(a.permission_type == "allow" for a in mine)


def authorized_operations(allowed, resource_type: str, name: str) -> int:
    """Kafka's bitfield of the operations `allowed(operation, resource_type, name)` permits
    on the resource, among those its type has (bit n set for AclOperation code n)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(operation, resource_type, name):
            bits |= 1 << OPERATION_CODES[operation]
    return bits
