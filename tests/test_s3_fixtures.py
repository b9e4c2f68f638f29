"""The test S3 server and the fault proxy do what the object-store tests rely on."""

import obstore
import pytest
from fault_proxy import Fault


def test_server_round_trip(s3_server):
    store = s3_server.raw_store()
    obstore.put(store, "fixtures/a", b"x" * 1000)
    assert bytes(obstore.get_range(store, "fixtures/a", start=10, end=20)) == b"x" * 10
    obstore.delete(store, "fixtures/a")
    with pytest.raises(FileNotFoundError):
        obstore.get(store, "fixtures/a")


def test_proxy_records_and_injects(s3_server, fault_proxy):
    store = s3_server.raw_store(endpoint=fault_proxy.endpoint)
    obstore.put(store, "fixtures/b", bytes(range(256)) * 4)
    got = obstore.get_range(store, "fixtures/b", start=1, end=3)
    assert bytes(got) == b"\x01\x02"
    gets = fault_proxy.requests("GET", "fixtures/b")
    assert len(gets) == 1 and gets[0].range == "bytes=1-2"

    # a SlowDown answer is retried by the client (max_retries=2) and then succeeds
    fault_proxy.add(Fault("status", method="GET", status=503, times=1))
    assert bytes(obstore.get_range(store, "fixtures/b", start=0, end=4)) == b"\x00\x01\x02\x03"
    assert [r.fault for r in fault_proxy.requests("GET")][-2:] == ["status", None]

    # a body cut short is an error, never short bytes
    fault_proxy.add(Fault("cut", method="GET", times=None, cut_after=10))
    with pytest.raises(Exception, match="(?i)body|decod|request|connection"):
        obstore.get(store, "fixtures/b").bytes()


def test_a_server_that_does_not_come_up_is_a_clear_failure(tmp_path):
    from s3_server import S3Server, S3ServerError

    server = S3Server(tmp_path / "weed", start_timeout_s=0.0)
    with pytest.raises(S3ServerError, match="did not come up on 127.0.0.1") as info:
        server.start()
    assert "not ready within 0 s" in str(info.value)
    assert server.proc is None  # every attempt's process was stopped
