"""Starting Ray and Spark (through RayDP) with the settings that make them work together.

Java 17 needs module opens, else the Ray Java worker and Spark's Arrow code die
("module java.base does not opens java.lang"); the same list goes to Ray and to Spark.
Executors must use this interpreter, or they pick a system Python without pyspark.
Every JVM (Ray's Java workers, Spark's driver and executors, RayDP's app master) logs through
`log4j2.properties` beside this file: warnings and errors only, on stderr (RayDP's defaults name
files that are not there, and log4j says "No configuration found" on stdout).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import ray

from ..driver.ray_runtime import ensure_ray

LOG4J2 = Path(__file__).with_name("log4j2.properties")

JAVA_OPENS = ["--add-opens=java.base/" + package + "=ALL-UNNAMED" for package in (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.math", "java.text",
    "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar")]
JVM_OPTIONS = [*JAVA_OPENS, f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}"]


class _RayDPAccess(logging.Filter):
    """Drops Ray's note that `ray.worker.global_worker` is private: RayDP 1.6.5 reads it
    (`raydp/spark/dataset.py` get_locations, on every `Dataset.to_spark`), not the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("DeprecationWarning: `ray.worker.global_worker`")


def init_ray(num_cpus: int | None = None, **kwargs: Any) -> None:
    """`ray.init` with the JVM options Spark-on-Ray needs; a no-op when Ray is already up."""
    if ray.is_initialized():
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    ensure_ray(ray.job_config.JobConfig(jvm_options=JVM_OPTIONS), num_cpus=num_cpus, **kwargs)


def init_spark(app_name: str = "raykafka", num_executors: int = 1, executor_cores: int = 1,
               executor_memory: str = "1G", configs: dict[str, str] | None = None) -> Any:
    """A Spark session on Ray through RayDP (Ray is started first if needed)."""
    import raydp  # heavy (it loads pyspark): only when Spark is asked for

    init_ray()
    if not any(isinstance(f, _RayDPAccess) for f in logging.getLogger("ray").filters):
        logging.getLogger("ray").addFilter(_RayDPAccess())
    opens = " ".join(JAVA_OPENS)
    settings = {key: opens for key in ("spark.ray.raydp_app_master.extraJavaOptions",
                                       "spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions")}
    # RayDP sets each JVM's -Dlog4j2.configurationFile itself, from these (its defaults name
    # files that are not on the class path): Spark's driver, and the JVMs it runs in Ray
    settings.update({"spark.log4j.config.file.name": LOG4J2.as_uri(),
                     "spark.ray.log4j.config.file.name": LOG4J2.as_uri()})
    settings.update({"spark.sql.execution.arrow.pyspark.enabled": "true",
                     "spark.sql.session.timeZone": "UTC",
                     "spark.ui.enabled": "false",
                     "spark.ui.showConsoleProgress": "false"})
    settings.update(configs or {})
    return raydp.init_spark(app_name, num_executors=num_executors, executor_cores=executor_cores,
                            executor_memory=executor_memory, configs=settings)


def stop_spark() -> None:
    import raydp  # heavy (it loads pyspark): only when Spark is asked for

    raydp.stop_spark()
