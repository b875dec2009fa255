"""A class-data sharing archive of Spark's classes for the test JVMs that run a Spark driver.

A Spark driver JVM loads some thousands of classes from Spark's jars before the first query;
mapped from an archive instead, a session starts in about a third of the time on 2 cores. The
archive is a dynamic one (``-XX:ArchiveClassesAtExit``): dumped once, in the background, by a
throw-away session in a subprocess whose JVM exits cleanly (the dump happens at its exit), under a
lock so that one process dumps it (sessions started meanwhile go without); kept per Spark and Java
version beside Kafka's jars (``~/.cache/topicwright/``). A JVM that cannot use it (another class
path, a changed JDK) starts without it: ``-Xshare:auto`` is the default, and JVM logging is off so
nothing is printed.

    python class_archive.py ARCHIVE    # the dumping subprocess
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The driver JVM's options without the archive: the client compiler, the serial collector.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
CACHE_ROOT = Path(os.environ.get("TOPICWRIGHT_KAFKA_CACHE", Path.home() / ".cache" / "topicwright"))


def _archive_path() -> Path:
    import pyspark

    java = shutil.which("java")
    java_id = os.path.realpath(java).replace(os.sep, "_") if java else "none"
    return CACHE_ROOT / f"spark-{pyspark.__version__}-classes{java_id}.jsa"


def driver_java_options() -> str:
    """``QUICK_JVM_OPTIONS``, plus the archive once it has been dumped."""
    archive = _archive_path()
    if not archive.exists():
        return QUICK_JVM_OPTIONS
    return f"{QUICK_JVM_OPTIONS} -XX:SharedArchiveFile={archive} -Xlog:disable"


_dumper: subprocess.Popen[bytes] | None = None


def dump_in_background() -> None:
    """Start the subprocess that dumps the archive, unless there is one: the sessions started
    meanwhile go without it. The subprocess gives up at once when another one is dumping."""
    global _dumper
    if _dumper is not None or _archive_path().exists():
        return
    _dumper = subprocess.Popen([sys.executable, __file__, str(_archive_path())], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(_stop_dumper, _dumper)


def _stop_dumper(dumper: subprocess.Popen[bytes]) -> None:
    """At exit: let a dump that is under way finish (its JVM is the subprocess's child), else end it."""
    try:
        dumper.wait(120)
    except subprocess.TimeoutExpired:
        dumper.kill()
        dumper.wait()


def _dump(archive: Path) -> None:
    """Dump ``archive`` (in this subprocess), unless another process holds the lock."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        if archive.exists():
            return
        partial = archive.with_suffix(f".{os.getpid()}.partial")
        try:
            _run_dumping_session(partial)
            if partial.exists() and partial.stat().st_size > 0:
                partial.rename(archive)
        finally:
            partial.unlink(missing_ok=True)


def _run_dumping_session(archive: Path) -> None:
    """Start a session whose JVM dumps ``archive`` at exit, run a query, and end the JVM the way
    a driver's ends (its stdin closed): the archive is complete once the JVM has exited."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"{QUICK_JVM_OPTIONS} -XX:ArchiveClassesAtExit={archive}")
        .getOrCreate()
    )
    spark.range(100).selectExpr("sum(id)").collect()
    gateway = spark.sparkContext._gateway
    spark.stop()
    process = gateway.proc
    process.stdin.close()  # Spark's gateway exits (System.exit) when its stdin closes
    process.wait(120)


if __name__ == "__main__":
    _dump(Path(sys.argv[1]))
