"""Starting Ray and Spark (through RayDP) with the settings that make them work together.

Java 17 needs module opens, else the Ray Java worker and Spark's Arrow code die
("module java.base does not opens java.lang"); the same list goes to Ray and to Spark.
Executors must use this interpreter, or they pick a system Python without pyspark.
"""

from __future__ import annotations

import os
import sys
from typing import Any

JAVA_OPENS = ["--add-opens=java.base/" + package + "=ALL-UNNAMED" for package in (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "java.math", "java.text",
    "sun.nio.ch", "sun.nio.cs", "sun.security.action", "sun.util.calendar")]


def init_ray(num_cpus: int | None = None, **kwargs: Any) -> None:
    """`ray.init` with the JVM options Spark-on-Ray needs; a no-op when Ray is already up."""
    import ray

    from ..driver.ray_runtime import ensure_ray

    if ray.is_initialized():
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    ensure_ray(ray.job_config.JobConfig(jvm_options=JAVA_OPENS), num_cpus=num_cpus, **kwargs)


def init_spark(app_name: str = "raykafka", num_executors: int = 1, executor_cores: int = 1,
               executor_memory: str = "1G", configs: dict[str, str] | None = None) -> Any:
    """A Spark session on Ray through RayDP (Ray is started first if needed)."""
    import raydp

    init_ray()
    opens = " ".join(JAVA_OPENS)
    settings = {key: opens for key in ("spark.ray.raydp_app_master.extraJavaOptions",
                                       "spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions")}
    settings.update({"spark.sql.execution.arrow.pyspark.enabled": "true",
                     "spark.sql.session.timeZone": "UTC",
                     "spark.ui.enabled": "false",
                     "spark.ui.showConsoleProgress": "false"})
    settings.update(configs or {})
    return raydp.init_spark(app_name, num_executors=num_executors, executor_cores=executor_cores,
                            executor_memory=executor_memory, configs=settings)


def stop_spark() -> None:
    import raydp

    raydp.stop_spark()
