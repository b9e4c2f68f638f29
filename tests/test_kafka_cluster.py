"""The real-Kafka harness (tests/kafka_cluster.py and the Java client of tests/kafka) against
real Apache Kafka brokers: what the Java producer had acknowledged, the Java consumer reads
back record for record (offset, timestamp, key, value, headers) in both isolation levels,
with aborted transactions hidden from read_committed; a group's commits hold; ListOffsets
answers as Kafka does; on three brokers the new leader after a kill -9 of the
old one serves every acknowledged record; a broker that cannot start fails with its log."""

from __future__ import annotations

import socket

import pytest
from kafka_cluster import ClientError, KafkaCluster, KafkaClusterError, run_client, wait_until

IDLE_MS = "1500"  # the consumer stops this long after its last record


def _records(lines: list[dict], kind: str) -> dict[tuple[int, int], tuple]:
    """(partition, offset) -> (timestamp, key, value, headers) of the lines of one type."""
    return {(r["partition"], r["offset"]): (r["timestamp"], r["key"], r["value"],
                                            [tuple(h) for h in r["headers"]])
            for r in lines if r["type"] == kind}


def _consume(cluster: KafkaCluster, topic: str, *args: str) -> dict:
    lines = cluster.run_client(["consume", "--topic", topic, "--idle-ms", IDLE_MS,
                                "--timeout-ms", "60000", *args], timeout=120)
    assert lines[-1]["type"] == "end" and not lines[-1]["timed_out"], lines[-1]
    return _records(lines, "record")


@pytest.fixture(scope="class")
def single(tmp_path_factory):
    with KafkaCluster(tmp_path_factory.mktemp("kafka1"), brokers=1) as cluster:
        yield cluster


@pytest.fixture(scope="class")
def transactional(single):
    """Two partitions of zstd records in transactions of 25, every third one aborted."""
    single.run_client(["create-topic", "--topic", "tx", "--partitions", "2"])
    produced = single.run_client(
        ["produce", "--topic", "tx", "--count", "400", "--seed", "7", "--compression", "zstd",
         "--transactional-id", "tx-producer", "--transaction-size", "25",
         "--abort-every", "3"], timeout=120)
    assert len(produced) == 400
    return produced


class TestSingleBroker:
    @pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
    def test_consumer_reads_what_the_producer_wrote(self, single, transactional, isolation):
        want = _records([r for r in transactional
                         if r["committed"] or isolation == "read_uncommitted"], "produced")
        assert {p for p, _ in want} == {0, 1}
        got = _consume(single, "tx", "--partitions", "0,1", "--isolation", isolation)
        assert sorted(got) == sorted(want)
        assert got == want
        if isolation == "read_committed":  # aborted records really were written
            assert len(want) < len(transactional)

    def test_group_commits_hold(self, single, transactional):
        group = ["--subscribe", "--group", "g1", "--isolation", "read_committed", "--commit"]
        first = _consume(single, "tx", *group)
        assert first == _records([r for r in transactional if r["committed"]], "produced")
        assert _consume(single, "tx", *group) == {}  # resumes at the committed end

    def test_list_offsets(self, single, transactional):
        # by timestamp on a topic without transactions: a commit marker's timestamp is the
        # time of the commit, which a lookup may find before the record it looks for
        single.run_client(["create-topic", "--topic", "plain"])
        records = single.run_client(["produce", "--topic", "plain", "--count", "200",
                                     "--timestamp-step", "10", "--compression", "gzip"])
        probe = records[123]
        [found] = single.run_client(["list-offsets", "--topic", "plain", "--partitions", "0",
                                     "--spec", str(probe["timestamp"] - 5)])
        assert (found["offset"], found["timestamp"]) == (123, probe["timestamp"])
        lines = single.run_client(["list-offsets", "--topic", "tx", "--partitions", "0",
                                   "--spec", "earliest", "--spec", "latest"])
        last = max(r["offset"] for r in transactional if r["partition"] == 0)
        # the last transaction's marker follows its last record
        assert [(r["spec"], r["offset"]) for r in lines] == [("earliest", 0),
                                                             ("latest", last + 2)]

    def test_client_errors_are_typed(self, single):
        with pytest.raises(ClientError) as e:
            single.run_client(["consume", "--topic", "tx", "--partitions", "0", "--bogus", "1"])
        assert e.value.returncode == 2 and "unknown option --bogus" in e.value.stderr
        with pytest.raises(ClientError) as e:
            single.run_client(["describe-topic", "--topic", "no-such-topic"])
        assert e.value.returncode == 1
        assert "UnknownTopicOrPartitionException" in e.value.stderr

    def test_a_rebalance_loses_and_repeats_nothing(self, single):
        """A second member joins while the first is consuming: the first gives partitions up
        (committing in onPartitionsRevoked), and between them the two read every record once."""
        single.run_client(["create-topic", "--topic", "rb", "--partitions", "4"])
        produced = single.run_client(["produce", "--topic", "rb", "--count", "1200", "--seed", "3"])
        member = ["consume", "--topic", "rb", "--subscribe", "--group", "rb", "--commit",
                  "--idle-ms", "4000", "--timeout-ms", "90000", "--poll-delay-ms", "200",
                  "--property", "max.poll.records=20"]
        first = single.start_client(member)
        try:
            wait_until("the first member's first records",
                       lambda: any(r["type"] == "record" for r in first.lines_so_far()), 60)
            second = single.run_client(member, timeout=120)
        finally:
            first_lines = first.result(timeout=120)
        events = [(r["type"], r["partitions"]) for r in first_lines
                  if r["type"] in ("assigned", "revoked")]
        assert events[0] == ("assigned", [0, 1, 2, 3]) and ("revoked", [0, 1, 2, 3]) in events
        read = [(r["partition"], r["offset"]) for r in first_lines + second
                if r["type"] == "record"]
        assert len(read) == len(set(read))  # nothing read twice
        assert _records(first_lines + second, "record") == _records(produced, "produced")
        assert {r["type"] for r in second} >= {"record", "assigned"}


class TestThreeBrokers:
    def test_new_leader_after_kill_serves_every_record(self, tmp_path_factory):
        # a dead broker is fenced (its leaderships moved) after 5 s without heartbeats, not 9
        with KafkaCluster(tmp_path_factory.mktemp("kafka3"), brokers=3,
                          server_properties={"broker.session.timeout.ms": 5000}) as cluster:
            cluster.run_client(["create-topic", "--topic", "r3", "--replication-factor", "3",
                                "--config", "min.insync.replicas=2"])
            produced = cluster.run_client(["produce", "--topic", "r3", "--count", "300",
                                           "--partition", "0", "--compression", "lz4"])
            want = _records(produced, "produced")
            old = cluster.leader("r3")

            def other_leader():
                leader = cluster.leader("r3")
                return leader if leader not in (old, -1) else None

            cluster.kill(old)
            new = wait_until(f"a leader other than node {old}", other_leader, timeout=60)
            assert _consume(cluster, "r3", "--partitions", "0") == want
            # the killed node comes back as a follower and rejoins the ISR
            cluster.start_node(old)
            wait_until("all three replicas in sync",
                       lambda: len(cluster.describe("r3")["isr"]) == 3, timeout=60)
            assert cluster.leader("r3") in (new, old)
            cluster.restart(new)
            assert _consume(cluster, "r3", "--partitions", "0") == want


def test_a_broker_that_cannot_start_fails_with_its_log(tmp_path):
    cluster = KafkaCluster(tmp_path, server_properties={"log.segment.bytes": "lots"})
    with pytest.raises(KafkaClusterError) as e:
        cluster.start()
    assert "log.segment.bytes" in str(e.value)  # Kafka's own message, from the log tail
    assert not any(n.running() for n in cluster.nodes.values())


def test_run_client_needs_a_command_it_knows():
    with pytest.raises(ClientError) as e:
        run_client(["fly"], timeout=60)
    assert e.value.returncode == 2 and "unknown subcommand fly" in e.value.stderr


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    """Kafka's storage tool takes `--cluster-id -x...` for an option; like Kafka's own
    Uuid.randomUuid, such ids are drawn again (0xf8 encodes to a leading `-`)."""
    import uuid

    import kafka_cluster

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x04" + bytes(15))])
    monkeypatch.setattr(kafka_cluster.uuid, "uuid4", lambda: next(draws))
    assert kafka_cluster.new_cluster_id() == "BAAAAAAAAAAAAAAAAAAAAA"


def test_a_port_taken_before_start_is_replaced(tmp_path):
    cluster = KafkaCluster(tmp_path)
    taken = cluster.node(1).port
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        s.listen()
        with cluster:
            assert cluster.node(1).port != taken and cluster.node(1).running()
            [created] = cluster.run_client(["create-topic", "--topic", "t"])
            assert created["topic"] == "t"
