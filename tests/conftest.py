"""Shared pytest fixtures."""

import os
import sys

import pytest

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:  # lets test modules `import vectors` under any import mode
    sys.path.insert(0, _TESTS_DIR)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`.ci/run`: -n 2 --dist loadgroup), every test module runs whole on
    one worker, so a module-scoped fixture (a tiered broker, a produced topic) is built once;
    the modules that read through Spark share one worker, so one Spark session serves them
    all."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    spark_modules = {item.module.__name__ for item in items
                     if "spark" in getattr(item, "fixturenames", ())}
    for item in items:
        module = item.module.__name__
        group = "spark" if module in spark_modules else module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def VECTORS():
    """The read-only conformance vectors, `<repo>/../shared/vectors` (see tests/vectors.py)."""
    import vectors

    if not vectors.VECTORS.is_dir():  # a missing checkout must fail loudly, never skip
        pytest.fail(f"conformance vectors not found at {vectors.VECTORS}")
    return vectors.VECTORS


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (SeaweedFS `weed mini`, tests/s3_server.py) on 127.0.0.1 for the
    session, with the bucket `engine-test`. Failing to start fails the tests that use it."""
    from s3_server import S3Server, S3ServerError

    server = S3Server(tmp_path_factory.mktemp("weed"))
    try:
        server.start()
    except S3ServerError as e:
        pytest.fail(str(e))
    yield server
    server.stop()


@pytest.fixture
def fault_proxy(s3_server):
    """A fault-injecting loopback proxy in front of `s3_server` (tests/fault_proxy.py),
    fresh per test."""
    from fault_proxy import FaultProxy

    with FaultProxy(s3_server.port) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark session for every test module that reads through Spark (a session
    takes seconds to start); stopped at the end of the run."""
    from spark_support import start_spark

    session = start_spark(2)
    yield session
    session.stop()
