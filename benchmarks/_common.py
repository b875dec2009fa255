"""What the client benchmarks share: the clock, running one measurement in a fresh worker process,
librdkafka's mock cluster in its own process, taking turns, medians, the spread of runs and the
table of ratios to aiokafka. The scripts are run as files (``python benchmarks/bench_x.py``), so
they import this module from their own folder."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Result = TypeVar("Result")


class Clock:
    """Wall time and this process's CPU time (all threads: librdkafka's and kafka-python's I/O
    threads count too) from creation to ``stop``. CPU per message is the steadier figure on a
    busy machine."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def call_worker(worker: Callable[..., Any], *args: Any) -> Any:
    """``worker(*args)``, run to completion on a new event loop if it is a coroutine function."""
    result = worker(*args)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def run_worker(worker: Callable[..., Any], *args: Any, profile: bool) -> Any:
    """:func:`call_worker`, under cProfile (the top 25 by own time to stderr) if ``profile``."""
    if not profile:
        return call_worker(worker, *args)
    profiler = cProfile.Profile()
    profiler.enable()
    result = call_worker(worker, *args)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(25)
    return result


def run_in_process(client: str, command: list[str], target: str | None = None) -> Any:
    """Runs a script's worker (``command``, after the interpreter) in a fresh process, from the
    project root, and returns the JSON its last line of output holds. ``target`` is passed on as
    ``BENCH_TARGET`` for workers that adapt to the mock cluster."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if target is not None:
        env["BENCH_TARGET"] = target
    out = subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"{client} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_rate(
    script: str, client: str, target: str, bootstrap: str, topic: str, n: int
) -> tuple[float, float]:
    """One run of ``script``'s worker for ``client`` over ``n`` messages, in a fresh process:
    messages per second, and CPU microseconds per message."""
    command = [script, "--worker", client, "--bootstrap", bootstrap, "--topic", topic, "--messages", str(n)]
    result = run_in_process(client, command, target)
    return n / result["elapsed"], result["cpu"] / n * 1e6


def client_parser(
    doc: str | None, messages: int, clients: Sequence[str], targets: Sequence[str]
) -> argparse.ArgumentParser:
    """The options of a client throughput benchmark, with the hidden ones its workers get."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=messages)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default=",".join(clients))
    parser.add_argument("--targets", default=",".join(targets))
    parser.add_argument("--profile", metavar="CLIENT", help="profile one client against the mock cluster")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    return parser


def report_worker(worker: Callable[..., Any], args: argparse.Namespace) -> None:
    """Runs a worker as :func:`measure_rate` asked and prints its (wall s, CPU s) as JSON."""
    elapsed, cpu = run_worker(worker, args.bootstrap, args.topic, args.messages, profile=False)
    print(json.dumps({"elapsed": elapsed, "cpu": cpu}))


class MockClusterProcess:
    """librdkafka's mock cluster in a child process (1 broker), so it does not share our GIL."""

    SCRIPT = (
        "import sys, confluent_kafka\n"
        "p = confluent_kafka.Producer({'test.mock.num.brokers': 1, 'log_level': 0})\n"
        "b = list(p.list_topics(timeout=10).brokers.values())[0]\n"
        "print(f'{b.host}:{b.port}', flush=True)\n"
        "sys.stdin.read()\n"
    )

    def popen_options(self) -> dict[str, Any]:
        """More ``subprocess.Popen`` arguments, for a SCRIPT that needs them."""
        return {}

    def __enter__(self) -> MockClusterProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            **self.popen_options(),
        )
        assert self.proc.stdout is not None
        self.bootstrap = self.proc.stdout.readline().strip()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def in_turns(
    runs: int, clients: Sequence[str], measure: Callable[..., Result], *args: Any
) -> dict[str, list[Result]]:
    """``measure(client, *args)`` for every client, ``runs`` rounds of them in turns, so that a slow
    spell of the machine hits every client rather than the one whose runs it happens to fall on."""
    results: dict[str, list[Result]] = {client: [] for client in clients}
    for _ in range(runs):
        for client in clients:
            results[client].append(measure(client, *args))
    return results


def medians(runs: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """The median rate and the median CPU cost of (msgs/s, CPU us/msg) runs."""
    runs = list(runs)
    return statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs)


#: Fewer runs than this have no meaningful quartiles (and ``statistics.quantiles``' default method
#: reaches past the data for them: two runs 0.5 and 4.0 give -0.375 and 4.875); their spread is
#: the smallest and the largest run instead.
QUARTILE_MIN_RUNS = 5


def spread(values: Sequence[float]) -> tuple[float, float]:
    """How far runs spread around their median: the lower and upper quartile (inclusive method,
    so never outside the runs) of ``QUARTILE_MIN_RUNS`` runs or more, else the minimum and the
    maximum. ValueError for no runs."""
    if not values:
        raise ValueError("no runs to spread")
    if len(values) < QUARTILE_MIN_RUNS:
        return min(values), max(values)
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, high


def spread_name(runs: int) -> str:
    """What :func:`spread` gives for ``runs`` runs, for a column header."""
    return "quartiles" if runs >= QUARTILE_MIN_RUNS else "min-max"


def show_runs(target: str, client: str, runs: Iterable[tuple[float, float]]) -> None:
    """Every run's (msgs/s, CPU us/msg) on stderr, as they come."""
    shown = ", ".join(f"{r:,.0f}/s {c:.1f}us" for r, c in runs)
    print(f"  {target:<9} {client:<16} {shown}", file=sys.stderr)


def print_ratio_table(
    clients: Sequence[str],
    targets: Sequence[str],
    rate: dict[tuple[str, str], float],
    cpu: dict[tuple[str, str], float],
) -> None:
    """A Markdown table, a row per client: per target the median msgs/s (ratio vs aiokafka) and the
    median CPU microseconds per message (ratio: aiokafka's CPU / this client's)."""
    head = " | ".join(f"{t + ' msgs/s':>20} | {t + ' CPU us/msg':>22}" for t in targets)
    print(f"| {'client':<16} | {head} |")
    print("|" + "|".join(["-" * 18] + ["-" * 22, "-" * 24] * len(targets)) + "|")
    for client in clients:
        cells = []
        for target in targets:
            key, base = (target, client), (target, "aiokafka")
            speed = f" ({rate[key] / rate[base]:.2f}x)" if base in rate else ""
            cost = f" ({cpu[base] / cpu[key]:.2f}x)" if base in cpu else ""
            cells.append(f"{rate[key]:>11,.0f}{speed:>9}")
            cells.append(f"{cpu[key]:>13.1f}{cost:>9}")
        print(f"| {client:<16} | " + " | ".join(cells) + " |")


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a process has used so far, user plus system, its ended threads included.

    From /proc/<pid>/stat (utime and stime, in clock ticks): a JVM starts and ends threads of its
    own, and the per-thread counters lose an ended thread's time. Linux only; ticks are 10 ms, so
    a figure is only as good as the run is long.
    """
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")
