"""A Spark session on which speculative execution really happens, for the driver subprocesses.

Spark never speculates in ``local[N]`` (TaskSchedulerImpl starts its speculation check only when
the master is not local), so the session is a ``local-cluster[2,1,1024]``: a standalone master
and two workers inside the driver JVM, each starting one executor JVM with one core (the pip
pyspark package is the Spark home). One more obstacle: a speculative copy never runs on a host
where the task already has an attempt (``TaskSetManager.dequeueTaskFromList`` skips it:
``speculative && hasAttemptOnHost``), and a local-cluster's executors all register the driver's
host name. So the executors are started through a ``java`` wrapper (``spark.executorEnv.JAVA_HOME``
is what Spark's worker looks up to build the executor's command) that gives executor ``n`` the
host ``127.0.0.<n+2>``: two loopback "hosts", one per executor, as in a real two-node cluster.

Speculation settings are aggressive (a task 1.5 times slower than the median of half the stage's
tasks and running for 1 s is copied; the efficiency heuristic, which needs input metrics Python
data sources do not report, is off), and Spark's event log records every task attempt, with its
``Speculative`` flag, so a test can check that a speculative copy ran and succeeded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

from tests.spark_integration.class_archive import driver_java_options

JAVA_WRAPPER = """\
#!/bin/bash
# An executor of a local-cluster on a loopback address of its own: 127.0.0.<executor id + 2>.
args=("$@"); id=0
for ((i = 0; i < ${#args[@]}; i++)); do [[ ${args[i]} == --executor-id ]] && id=${args[i+1]}; done
for ((i = 0; i < ${#args[@]}; i++)); do [[ ${args[i]} == --hostname ]] && args[i+1]=127.0.0.$((id + 2)); done
exec %(java)s "${args[@]}"
"""

def _real_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home, "bin", "java") if java_home else None
    found = str(candidate) if candidate and candidate.exists() else shutil.which("java")
    if found is None:
        raise RuntimeError("no java found (JAVA_HOME or PATH)")
    return os.path.realpath(found)


def executor_java_home(workdir: Path) -> Path:
    """A directory whose ``bin/java`` runs the real java with the executor's host rewritten."""
    home = workdir / "executor-jdk"
    wrapper = home / "bin" / "java"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(JAVA_WRAPPER % {"java": _real_java()})
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return home


def speculative_session(app_name: str, workdir: Path, event_log: Path) -> Any:
    """A local-cluster[2,1,1024] session with speculative execution on and the event log in
    ``event_log``."""
    import pyspark
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    event_log.mkdir(parents=True, exist_ok=True)
    java_options = driver_java_options()  # the executors share the driver's class path and archive
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.executorEnv.JAVA_HOME", str(executor_java_home(workdir)))
        .config("spark.speculation", "true")
        .config("spark.speculation.interval", "100ms")
        .config("spark.speculation.multiplier", "1.5")
        .config("spark.speculation.quantile", "0.5")
        .config("spark.speculation.minTaskRuntime", "1s")
        .config("spark.speculation.efficiency.enabled", "false")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", event_log.as_uri())
        .config("spark.eventLog.compress", "false")  # plain JSON lines, readable after a SIGKILL
        .config("spark.eventLog.rolling.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def task_attempts(event_log: Path) -> list[dict[str, Any]]:
    """Every finished task attempt in the event logs under ``event_log``: stage, index (the
    partition), attempt, speculative, host, and end reason, from SparkListenerTaskEnd events."""
    attempts = []
    for path in sorted(p for p in event_log.iterdir() if p.is_file()):
        with path.open(errors="replace") as lines:
            for line in lines:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:  # the last line of a killed driver's log may be cut short
                    continue
                info = event["Task Info"]
                attempts.append({
                    "log": path.name, "stage": event["Stage ID"], "index": info["Index"],
                    "attempt": info["Attempt"], "speculative": info["Speculative"], "host": info["Host"],
                    "reason": event["Task End Reason"]["Reason"],
                })
    return attempts


def speculative_successes(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The speculative task attempts (from ``task_attempts``) that finished with Success."""
    return [a for a in attempts if a["speculative"] and a["reason"] == "Success"]


def finish_driver(driver: subprocess.Popen[str], timeout: float) -> str:
    """The driver subprocess's output once it exits; after ``timeout`` its whole process group
    (Spark's JVM and Python workers included) is SIGKILLed."""
    try:
        output, _ = driver.communicate(timeout=timeout)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return output
