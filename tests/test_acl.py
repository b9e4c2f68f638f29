"""The rules of `serve`'s ACLs (engine.protocol.acl), as Kafka's StandardAuthorizer has them:
READ implies DESCRIBE and not the other way round, a DENY wins over any ALLOW but denies only
its own operation, `User:*` and `*` match everyone and everything, prefixed patterns match by
name start, `super.users` are always allowed, and a resource without any ACL is decided by
`allow.everyone.if.no.acl.found`; bad ACL files are config errors naming the file."""

from __future__ import annotations

import json

import pytest

from engine.config import BrokerConfig
from engine.errors import ConfigError
from engine.protocol.acl import Authorizer


def _authorizer(tmp_path, acls, **props) -> Authorizer:
    path = tmp_path / "acls.json"
    path.write_text(json.dumps(acls))
    config = BrokerConfig({"authorizer.class.name": "engine.protocol.acl.Authorizer",
                           "engine.acls.file": str(path), **props})
    authorizer = Authorizer.from_config(config)
    assert authorizer is not None
    return authorizer


def _acl(principal, operation, name="orders", *, resource="topic", pattern="literal",
         permission="allow"):
    return {"principal": principal, "resource_type": resource, "resource_name": name,
            "pattern_type": pattern, "operation": operation, "permission_type": permission}


def test_read_implies_describe_and_describe_alone_does_not_read(tmp_path):
    auth = _authorizer(tmp_path, [_acl("User:alice", "read"), _acl("User:bob", "describe")])
    assert auth.allowed("User:alice", "read", "topic", "orders")
    assert auth.allowed("User:alice", "describe", "topic", "orders")
    assert auth.allowed("User:bob", "describe", "topic", "orders")
    assert not auth.allowed("User:bob", "read", "topic", "orders")
    assert not auth.allowed("User:carol", "describe", "topic", "orders")
    # describe_configs is its own operation: read does not give it
    assert not auth.allowed("User:alice", "describe_configs", "topic", "orders")


def test_a_deny_wins_but_denies_only_its_operation(tmp_path):
    auth = _authorizer(tmp_path, [_acl("User:*", "read"),
                                  _acl("User:mallory", "read", permission="deny")])
    assert auth.allowed("User:alice", "read", "topic", "orders")
    assert not auth.allowed("User:mallory", "read", "topic", "orders")
    # the read allowed to everyone still implies describe for mallory: a deny of read is
    # not a deny of describe
    assert auth.allowed("User:mallory", "describe", "topic", "orders")
    everything = _authorizer(tmp_path, [_acl("User:*", "read"),
                                        _acl("User:mallory", "all", permission="deny")])
    assert not everything.allowed("User:mallory", "describe", "topic", "orders")


def test_wildcards_prefixes_and_resource_types(tmp_path):
    auth = _authorizer(tmp_path, [
        _acl("User:alice", "read", "*"),
        _acl("User:bob", "read", "team-", pattern="prefixed"),
        _acl("User:bob", "read", "team-", resource="group", pattern="prefixed")])
    assert auth.allowed("User:alice", "read", "topic", "anything")
    assert not auth.allowed("User:alice", "read", "group", "anything")  # topics only
    assert auth.allowed("User:bob", "read", "topic", "team-a")
    assert not auth.allowed("User:bob", "read", "topic", "teams")
    assert auth.allowed("User:bob", "read", "group", "team-consumers")


def test_super_users_and_resources_without_acls(tmp_path):
    acls = [_acl("User:alice", "read")]
    closed = _authorizer(tmp_path, acls, **{"super.users": "User:admin;User:ops"})
    assert closed.allowed("User:admin", "read", "topic", "orders")
    assert closed.allowed("User:ops", "describe", "group", "any")
    assert not closed.allowed("User:alice", "read", "topic", "payments")  # no ACL: denied
    open_ = _authorizer(tmp_path, acls, **{"allow.everyone.if.no.acl.found": "true"})
    assert open_.allowed("User:anyone", "read", "topic", "payments")
    # a resource with ACLs stays closed to everyone else
    assert not open_.allowed("User:anyone", "read", "topic", "orders")


def test_no_authorizer_means_no_checks():
    assert Authorizer.from_config(BrokerConfig({})) is None


@pytest.mark.parametrize("content, says", [
    ("not json", "not JSON"),
    ('{"principal": "User:a"}', "a JSON list"),
    (json.dumps([{"principal": "User:a", "resource_type": "delegation_token",
                  "resource_name": "x", "operation": "read"}]), "resource_type in"),
    (json.dumps([{"principal": "alice", "resource_type": "topic", "resource_name": "x",
                  "operation": "read"}]), "principal Type:name"),
    (json.dumps([{"resource_type": "topic"}]), "bad ACL"),
])
def test_bad_acl_files_are_config_errors_naming_the_file(tmp_path, content, says):
    path = tmp_path / "acls.json"
    path.write_text(content)
    config = BrokerConfig({"authorizer.class.name": "engine.protocol.acl.Authorizer",
                           "engine.acls.file": str(path)})
    with pytest.raises(ConfigError, match=says) as caught:
        Authorizer.from_config(config)
    assert caught.value.key == "engine.acls.file" and caught.value.value == str(path)
