#!/usr/bin/env bash
# Creates .venv and installs the engine from source (its native core compiles here).
#   scripts/setup.sh        the engine and its runtime dependencies
#   scripts/setup.sh test   plus the test extras (pytest, hypothesis, peers, atheris, pyarrow),
#                           and real Apache Kafka for the tests (tests/kafka, Maven)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
extras=""
if [ "${1:-}" = "test" ]; then
    extras="[test]"
fi
# editable, so the compiled modules land beside the sources the tests import; compat mode
# puts the project dir on sys.path through a .pth, so pkgutil.iter_modules (how PySpark
# finds the top-level pyspark_kafka_tiered data source) sees it as it would in a wheel
.venv/bin/python -m pip install -q -e ".${extras}" --config-settings editable_mode=compat
if [ "${1:-}" = "test" ]; then
    # real Apache Kafka for the tests: the broker's classpath in tests/kafka/target/lib/ and
    # the client program tests/kafka/target/kafka-test-client.jar (Maven Central, cached)
    mvn -q -f tests/kafka/pom.xml package
fi
