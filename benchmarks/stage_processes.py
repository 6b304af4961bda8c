"""What a producer's stage processes cost to start: the five stage kinds as five actors, as today,
beside the three dispatchers in one actor (a proposal to DESIGN.md's process budget).

    python -m raykafka.benchmarks.stage_processes [--rounds 6] [--pause 2]

Each round starts one set of actors on a local Ray of 2 CPUs and times them to their first
answer. Every actor imports the stage modules it would host (the module a real stage's class
lives in, with all it loads), so a round costs what a `Producer`'s start costs in processes and
imports, without its broker look-ups. The two shapes alternate, which goes first switching
every round. A round's actors are killed and the next round waits `--pause` s. Printed: each
shape's median, lowest and highest, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import ray

STAGES = "raykafka.actors."
SHAPES = {
    "five stage actors (today)": [
        ("topic_dispatcher",), ("partition_dispatcher",), ("leader_dispatcher",), ("retry_handler",),
        ("broker_worker",)],
    "three (the dispatchers in one)": [
        ("topic_dispatcher", "partition_dispatcher", "leader_dispatcher"), ("retry_handler",),
        ("broker_worker",)],
}
SETTLE = 3.0  # s after ray.init, for the workers Ray starts on its own to be up


@ray.remote(num_cpus=0)
class Stage:
    def load(self, *modules: str) -> int:
        for module in modules:
            importlib.import_module(STAGES + module)
        return len(modules)


def one_round(shape: list[tuple[str, ...]]) -> float:
    started = time.monotonic()
    actors = [Stage.remote() for _ in shape]
    ray.get([actor.load.remote(*modules) for actor, modules in zip(actors, shape, strict=True)])
    took = time.monotonic() - started
    for actor in actors:
        ray.kill(actor)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each shape")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between rounds")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False)
    time.sleep(SETTLE)
    taken: dict[str, list[float]] = {name: [] for name in SHAPES}
    names = list(SHAPES)
    for n in range(args.rounds):
        for name in names if n % 2 == 0 else names[::-1]:
            taken[name].append(one_round(SHAPES[name]))
            time.sleep(args.pause)
    ray.shutdown()
    medians = {name: statistics.median(seconds) for name, seconds in taken.items()}
    for name, seconds in taken.items():
        print(f"{name:<32} median {medians[name]:.2f} s  lowest {min(seconds):.2f}  highest {max(seconds):.2f}"
              f"  ({len(seconds)} rounds)")
    first, second = names
    print(f"ratio of the medians: {medians[second] / medians[first]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
