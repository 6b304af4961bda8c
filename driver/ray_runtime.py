"""Joining the Ray cluster a job runs in, or starting Ray: the one place raykafka calls `ray.init`,
but for the benchmarks (`app/bench/`), which start a Ray of their own to measure in (a local one
of a set size, or a test cluster's), each run its own (tests/unit/test_layers.py holds the rule).

Called by `Producer`, `Consumer`, `ConsumerGroup`, `raykafka produce` and
`spark_bridge.session.init_ray`, each time one is built; calls `ray.init` at most once per process.

The policy is the one a Ray user's own bare `ray.init()` follows; raykafka never chooses Ray's
resources:
1. Ray already initialized in this process (the program called `ray.init` itself, with whatever
   it wanted): used as it is.
2. A cluster to join: the one `RAY_ADDRESS` names (`ray job submit` sets it for its jobs), else
   the one `ray start` recorded on this machine (a `ray up` head, where `ray submit` runs a
   job). It is joined as it is: nothing about resources or the dashboard is passed.
3. Otherwise a local Ray is started with Ray's own defaults (every CPU Ray finds, its memory and
   object store sizes), without the dashboard.
Either way the program keeps its own logging (`configure_logging=False`) and the actors' output
stays in Ray's log files (`log_to_driver=False`).

A caller may pass `ray.init` options of its own (the tests and the benchmark ask for `num_cpus=2`
on a shared 2-core machine); they go to `ray.init` as given, so options that only make sense
for a new Ray (`num_cpus`, `resources`, ...) are refused by Ray when there is a cluster to join.
"""

from __future__ import annotations

import threading
from typing import Any

import ray

# Ray's private modules, used here and nowhere else. Ray has no public call for the address a bare
# `ray.init()` would join, and its public actor listing (`ray.util.state`) needs the dashboard,
# which a local Ray started here runs without.
import ray._private.state
from ray._private.services import canonicalize_bootstrap_address

# Either way: the driver's logging is the program's, the actors' output goes to Ray's log files.
QUIET = {"log_to_driver": False, "configure_logging": False}
# Only when this process starts Ray itself.
NEW_LOCAL_RAY = {"include_dashboard": False}

_starting = threading.Lock()  # two objects built at once in two threads start Ray once


def cluster_address() -> str | None:
    """The cluster a bare `ray.init()` would join (from `RAY_ADDRESS`, else the address `ray start`
    recorded on this machine), or None when it would start a new local Ray. Ray's own lookup."""
    return canonicalize_bootstrap_address(None)


def actor_table() -> dict[str, dict[str, Any]]:
    """Every actor the cluster knows, alive or dead, by actor id: `Name`, `State`, `DeathCause`
    among the fields. Ray's own table (see the note on the imports)."""
    return ray._private.state.actors()


def ensure_ray(job_config: Any = None, **options: Any) -> None:
    """Connect this process to Ray by the policy above, unless it already is."""
    with _starting:
        if ray.is_initialized():
            return
        if cluster_address() is None:
            ray.init(address="local", job_config=job_config, **{**QUIET, **NEW_LOCAL_RAY, **options})
        else:
            ray.init(job_config=job_config, **{**QUIET, **options})
