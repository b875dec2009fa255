"""How fast could any broker process be here? The produce phase against a broker that stores nothing.

``bench_broker.py`` finds the produce phase bound by the load generator's Python thread, so a
faster log may not show in its msgs/s. This measures the ceiling: the reference broker, the same
broker with its log taken out of Produce (every partition answered at once with made-up offsets,
nothing validated or written; the network layer, the codec and the event loop are unchanged) and
librdkafka's mock cluster, produce only, taking turns run by run as in ``bench_broker``:

    python benchmarks/produce_ceiling.py [--messages 300000] [--runs 12] [--partitions 1 8]

Prints each target's median msgs/s and broker CPU per message, and each broker's paired ratio to
the mock. If the log-less broker is no faster than the mock either, what separates the reference
broker from the mock in ``bench_broker``'s produce phase is not the log's work but the cost of
any broker that runs as a separate Python process on the load generator's two cores.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import process_cpu_seconds, spread_name
from bench_broker import (  # a script beside this one, not a package
    MockTarget,
    ReferenceTarget,
    client_gc_paused,
    create_topic,
    paired_ratios,
    produce,
)

from reference_broker.testing import LISTENING_PREFIX


def serve_without_log(argv: list[str]) -> int:
    """The child: ``python -m reference_broker`` with Produce answered without touching the log."""
    from reference_broker import __main__ as broker_main
    from reference_broker.handlers import produce as produce_handler
    from sdk.protocol.messages import ProduceResponse

    next_offsets: dict[tuple[str, int], int] = {}

    def answer_only(_broker: object, info: object, index: int, records: object, *_rest: object) -> object:
        key = (info.name, index)  # type: ignore[attr-defined]
        base = next_offsets.get(key, 0)
        # Not real offsets (nothing is stored): librdkafka only passes them to delivery reports.
        next_offsets[key] = base + 1
        return ProduceResponse.PartitionProduceResponse(
            index=index, error_code=0, base_offset=base, log_append_time_ms=-1, log_start_offset=0
        )

    produce_handler._append = answer_only  # type: ignore[assignment]
    return broker_main.main(argv)


class LoglessTarget:
    """The reference broker as a subprocess, its Produce handler answering without the log."""

    name = "no-log"

    def __enter__(self) -> LoglessTarget:
        self._scratch = tempfile.TemporaryDirectory(prefix="produce-ceiling-")
        cmd = [sys.executable, __file__, "--serve", "--data-dir", self._scratch.name, "--port", "0"]
        cmd += ["--log-level", "WARNING"]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith(LISTENING_PREFIX):
            self.__exit__()
            raise RuntimeError(f"log-less broker did not start: {line!r}")
        self.bootstrap = line[len(LISTENING_PREFIX) :].strip()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._scratch.cleanup()

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic(self.bootstrap, name, partitions)

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self._proc.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--partitions", type=int, nargs="*", default=[1, 8])
    args = parser.parse_args()
    print(f"{args.messages} messages of 100 bytes, acks=all, idempotent; produce only; median of {args.runs}")
    print(
        f"{'partitions':>10} {'target':>10} {'msgs/s':>12} {'cpu us/msg':>10} {'x/mock':>7}"
        f" {spread_name(args.runs):>11} {'x>=mock':>8}"
    )
    with ReferenceTarget() as reference, LoglessTarget() as logless, MockTarget() as mock:
        targets: list[ReferenceTarget | LoglessTarget | MockTarget] = [reference, logless, mock]
        orders = list(itertools.permutations(targets))
        for partitions in args.partitions:
            rates: dict[str, list[float]] = {t.name: [] for t in targets}
            cpu: dict[str, list[float]] = {t.name: [] for t in targets}
            for run in range(args.runs):
                for t in orders[run % len(orders)]:  # every order in turn: no target always first
                    topic = f"ceiling-{partitions}-{uuid.uuid4().hex[:8]}"
                    t.create_topic(topic, partitions)
                    with client_gc_paused():
                        before = t.cpu_seconds()
                        elapsed = produce(t.bootstrap, topic, args.messages, partitions).seconds
                        cpu[t.name].append((t.cpu_seconds() - before) * 1e6 / args.messages)
                    rates[t.name].append(args.messages / elapsed)
            for t in targets:
                shown = ""
                if t is not mock:
                    p = paired_ratios(rates[t.name], rates[mock.name])
                    shown = f"{p.median:7.2f} {p.low:5.2f}-{p.high:<5.2f}"
                    shown += f" {p.wins:>4}/{p.runs}"
                print(
                    f"{partitions:>10} {t.name:>10} {statistics.median(rates[t.name]):12,.0f}"
                    f" {statistics.median(cpu[t.name]):10.2f} {shown}",
                    flush=True,
                )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve_without_log(sys.argv[2:]))
    main()
