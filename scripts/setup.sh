#!/usr/bin/env bash
# Creates .venv, installs the engine from source (its native core compiles here) and builds the
# Apache Kafka broker plugin (kafka-plugin/, Maven) into .venv/share/kafka-tier-engine/.
#   scripts/setup.sh        the engine, its runtime dependencies and the broker plugin
#   scripts/setup.sh test   plus the test extras (pytest, pytest-xdist, hypothesis, peers,
#                           atheris, pyarrow), and real Apache Kafka for the tests
#                           (tests/kafka, Maven)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# jep (the plugin's embedded CPython) compiles against the JDK that builds the plugin
if [ -z "${JAVA_HOME:-}" ]; then
    JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
fi
export JAVA_HOME
extras="kafka-plugin"
if [ "${1:-}" = "test" ]; then
    extras="kafka-plugin,test"
fi
# editable, so the compiled modules land beside the sources the tests import; compat mode
# puts the project dir on sys.path through a .pth, so pkgutil.iter_modules (how PySpark
# finds the top-level pyspark_kafka_tiered data source) sees it as it would in a wheel
.venv/bin/python -m pip install -q -e ".[${extras}]" --config-settings editable_mode=compat

# the broker plugin: jep's Java classes come from the venv's own jep (installed into the
# local Maven repository under jep's coordinates), so the jar always matches its libjep
jep_version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('jep'))")
jep_dir=$(.venv/bin/python -c \
    "import importlib.util as u; print(u.find_spec('jep').submodule_search_locations[0])")
mvn -q -B install:install-file -Dfile="$jep_dir/jep-$jep_version.jar" -DgroupId=black.ninia \
    -DartifactId=jep -Dversion="$jep_version" -Dpackaging=jar
mvn -q -B -f kafka-plugin/pom.xml package -Djep.version="$jep_version"
mkdir -p .venv/share/kafka-tier-engine
cp kafka-plugin/target/kafka-tier-engine-plugin.jar .venv/share/kafka-tier-engine/

if [ "${1:-}" = "test" ]; then
    # real Apache Kafka for the tests: the broker's classpath in tests/kafka/target/lib/ and
    # the client program tests/kafka/target/kafka-test-client.jar (Maven Central, cached)
    mvn -q -B -f tests/kafka/pom.xml package
fi
