#!/usr/bin/env bash
# Sets up a fresh clone: a virtualenv in .venv with raykafka (editable) and its test extras,
# and Java 17 for Spark if the machine has none.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
if ! command -v java >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless
  else
    echo "setup.sh: Java 17 is needed for Spark; install it and run again" >&2
    exit 1
  fi
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# An editable install leaves the package's bytecode to the processes that import it, and where
# PYTHONDONTWRITEBYTECODE is set none writes it: every Ray worker would compile the modules it
# imports again. Compiled once here instead (benchmarks/stage_processes.py times the difference).
.venv/bin/python -m compileall -q __init__.py actors app driver mock spark_bridge wire >/dev/null
