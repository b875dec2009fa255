"""One SparkSession for the whole test run, started only when a Spark test asks for it.

local[2,3]: two cores, and a failed task is retried (up to 3 attempts), which the sink's
failure-injection tests rely on. The UI is off, shuffles use 2 partitions, the JVM starts with
the C1 compiler only, the serial collector and a class-data sharing archive of Spark's classes
(``class_archive.py``, dumped in the background before the first interop test here), and log4j2
is quiet: a session starts in ~5 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")

from tests.spark_integration.class_archive import driver_java_options, dump_in_background  # noqa: E402

QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test that starts Spark (here or in a driver subprocess): the class archive."""
    if item.get_closest_marker("interop"):
        dump_in_background()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import spark_integration

    log_config: Path = tmp_path_factory.mktemp("spark") / "log4j2.properties"
    log_config.write_text(QUIET_LOG4J2)
    java_options = f"{driver_java_options()} -Dlog4j2.configurationFile=file:{log_config}"
    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("spark_integration-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_integration.register(session)
    try:
        yield session
    finally:
        session.stop()
