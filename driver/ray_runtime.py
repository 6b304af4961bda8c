"""Joining the Ray cluster a job runs in, or starting Ray: the one place raykafka calls `ray.init`,
but for the benchmarks (`app/bench/`, `benchmarks/`), which start a Ray of their own to measure in (a local one
of a set size, or a test cluster's), each run its own (tests/unit/test_layers.py holds the rule).

Called by `Producer`, `Consumer`, `ConsumerGroup` and `spark_bridge.session.init_ray`, each
time one is built; calls `ray.init` at most once per process. `raykafka produce` and
`consume -e` ask `ray_to_join` first: with no Ray to join they run in their own process and
start none.

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
stays in Ray's log files (`log_to_driver=False`). What Ray's core prints to the process's stderr
while `ray.init` runs (that token authentication is on, for one: it stays on) goes to the
`raykafka.ray` log instead, and to stderr too when `ray.init` fails, since it may say why.

A caller may pass `ray.init` options of its own (the tests and the benchmark ask for `num_cpus=2`
on a shared 2-core machine); they go to `ray.init` as given, so options that only make sense
for a new Ray (`num_cpus`, `resources`, ...) are refused by Ray when there is a cluster to join.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import ray

# Ray's private modules, used here and nowhere else. Ray has no public call for the address a bare
# `ray.init()` would join, and its public actor listing (`ray.util.state`) needs the dashboard,
# which a local Ray started here runs without.
import ray._private.state
from ray._private import auto_init_hook
from ray._private.services import canonicalize_bootstrap_address

# Either way: the driver's logging is the program's, the actors' output goes to Ray's log files.
QUIET = {"log_to_driver": False, "configure_logging": False}
# Only when this process starts Ray itself.
NEW_LOCAL_RAY = {"include_dashboard": False}

_starting = threading.Lock()  # two objects built at once in two threads start Ray once
log = logging.getLogger("raykafka.ray")
STDERR = 2  # the file descriptor Ray's core prints its start-up notes to


@contextmanager
def start_notes_to_log() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file while the block runs; its lines then go to the
    `raykafka.ray` log (INFO), and to stderr as well when the block raised."""
    sys.stderr.flush()
    saved = os.dup(STDERR)
    failed = False
    with tempfile.TemporaryFile() as notes:
        os.dup2(notes.fileno(), STDERR)
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, STDERR)
            os.close(saved)
            notes.seek(0)
            text = notes.read().decode(errors="replace")
            for line in filter(None, text.splitlines()):
                log.info("ray: %s", line)
            if failed and text:
                sys.stderr.write(text)


def cluster_address() -> str | None:
    """The cluster a bare `ray.init()` would join (from `RAY_ADDRESS`, else the address `ray start`
    recorded on this machine), or None when it would start a new local Ray. Ray's own lookup."""
    return canonicalize_bootstrap_address(None)


def ray_to_join() -> bool:
    """Whether `ensure_ray` would use or join a Ray rather than start one: Ray is initialized in
    this process, or there is a cluster to join. Without one, `raykafka produce` and
    `consume -e` run in their own process rather than start a whole local Ray."""
    return ray.is_initialized() or cluster_address() is not None


def actor_table() -> dict[str, dict[str, Any]]:
    """Every actor the cluster knows, alive or dead, by actor id: `Name`, `State`, `DeathCause`
    among the fields. Ray's own table (see the note on the imports)."""
    return ray._private.state.actors()


def ensure_ray(job_config: Any = None, **options: Any) -> None:
    """Connect this process to Ray by the policy above, unless it already is."""
    with _starting:
        if ray.is_initialized():
            return
        with start_notes_to_log():
            if cluster_address() is None:
                ray.init(address="local", job_config=job_config, **{**QUIET, **NEW_LOCAL_RAY, **options})
            else:
                ray.init(job_config=job_config, **{**QUIET, **options})


class RaySession:
    """The Ray this process was connected to when an owner (a `Producer`) started, to tell when
    it was shut down under the owner. Not `ray.is_initialized()` alone: a thread that calls an
    actor after `ray.shutdown()` makes Ray start a new local one on its own (its auto-init), and
    that one is not the owner's (its actors are not there)."""

    def __init__(self) -> None:
        self.address = ray.get_runtime_context().gcs_address

    def gone(self) -> bool:
        return not ray.is_initialized() or ray.get_runtime_context().gcs_address != self.address


# A background thread of ours (a producer's sender, results, healer and watchdog threads) must not
# start a Ray: after the program's `ray.shutdown()`, Ray's auto-init would start a new local Ray on
# the thread's next Ray call, nobody's, taking seconds and holding the thread. Ray has no public
# switch per thread (`RAY_ENABLE_AUTO_CONNECT` is read once, for the whole process); its hook is a
# module function, replaced here once, in this one place: in a thread marked ours it does nothing,
# so the call raises Ray's "not started" error, which the thread takes as Ray gone.
_THREAD = threading.local()
# Ray's modules that call the hook by a name of their own (bound when they were imported)
_HOOK_USERS = ("ray._private.auto_init_hook", "ray._private.client_mode_hook", "ray.util.placement_group")


def starts_no_ray(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target`, for a background thread of ours: no Ray call in it starts a Ray."""

    @functools.wraps(target)
    def run(*args: Any, **kwargs: Any) -> Any:
        _THREAD.starts_no_ray = True
        return target(*args, **kwargs)

    return run


def _hold_auto_init_in_our_threads() -> None:
    auto_init = auto_init_hook.auto_init_ray
    if getattr(auto_init, "held_in_our_threads", False):
        return

    def auto_init_unless_ours() -> None:
        if not getattr(_THREAD, "starts_no_ray", False):
            auto_init()

    auto_init_unless_ours.held_in_our_threads = True  # type: ignore[attr-defined]
    for name in _HOOK_USERS:
        module = importlib.import_module(name)
        if getattr(module, "auto_init_ray", None) is auto_init:
            module.auto_init_ray = auto_init_unless_ours


_hold_auto_init_in_our_threads()
