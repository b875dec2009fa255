"""Where the reference broker spends its time under the ``bench_broker`` workload (cProfile).

Runs the broker as a subprocess, exactly as ``bench_broker.py`` does, but wrapped so that
SIGUSR1 starts a ``cProfile`` profiler inside it and SIGUSR2 stops it and dumps the stats. The
produce phase and the consume (fetch) phase are profiled separately, so each breakdown shows only
its own path:

    python benchmarks/profile_broker.py [--messages 300000] [--partitions 1] [--top 25]
        [--batch-messages N]

Prints, per phase, the functions with the most own time ("tottime") as a share of all profiled
time, and a few cumulative figures. The profiler's clock is the broker thread's CPU time: with
the load generator on the same two cores, wall-clock time charged a send() with the time the
woken client ran instead of the broker, and the event loop's poll with the waits. cProfile still
inflates call-heavy code, so shares are relative; the throughput of an unprofiled run is what
``bench_broker.py`` reports. ``--batch-messages`` fixes librdkafka's batch size (otherwise its
timing picks either a few huge batches or about a thousand small ones, see ``bench_broker``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

_LISTENING = "reference_broker listening on "


def serve(data_dir: Path, out_dir: Path) -> None:
    """The child: run the broker, toggling a profiler on SIGUSR1 (start) / SIGUSR2 (dump)."""
    from reference_broker._event_loop import loop_factory
    from reference_broker._memory import keep_freed_memory
    from reference_broker.broker import Broker
    from reference_broker.config import BrokerConfig

    keep_freed_memory()  # as ``python -m reference_broker`` does

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        state: dict[str, object] = {"profiler": None, "count": 0}

        def start() -> None:
            profiler = cProfile.Profile(time.thread_time)
            state["profiler"] = profiler
            profiler.enable()

        def dump() -> None:
            profiler = state["profiler"]
            if isinstance(profiler, cProfile.Profile):
                profiler.disable()
                count = int(state["count"])  # type: ignore[call-overload]
                profiler.dump_stats(out_dir / f"phase{count}.prof")
                state["count"] = count + 1
                state["profiler"] = None
            (out_dir / "dumped").write_text(str(state["count"]))

        loop.add_signal_handler(signal.SIGUSR1, start)
        loop.add_signal_handler(signal.SIGUSR2, dump)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        config = BrokerConfig.build(data_dir=data_dir, host="127.0.0.1", port=0, log_level="WARNING")
        async with Broker(config) as broker:
            print(f"{_LISTENING}{broker.host}:{broker.port}", flush=True)
            await stop.wait()

    with asyncio.Runner(loop_factory=loop_factory()) as runner:  # the loop the CLI picks
        runner.run(main())


def _report(path: Path, title: str, top: int) -> None:
    stats = pstats.Stats(str(path))
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values()) or 1e-9
    rows = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    print(f"\n== {title}: {total:.2f} s profiled (own time per function, share of total)")
    print(f"{'own s':>8} {'share':>6} {'cum s':>8} {'calls':>9}  function")
    for (file, line, name), (_cc, calls, tt, ct, _callers) in rows:
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        print(f"{tt:8.3f} {100 * tt / total:5.1f}% {ct:8.3f} {calls:9d}  {name} ({where})")


def drive(messages: int, partitions: int, top: int, batch_messages: int | None = None) -> None:
    """The parent: start the child, run the bench phases between profiler toggles, report."""
    import confluent_kafka.admin as ck_admin

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_broker import consume, produce  # the same client settings as the benchmark

    with tempfile.TemporaryDirectory(prefix="profile-broker-") as scratch:
        out_dir = Path(scratch)
        cmd = [sys.executable, __file__, "--serve", str(out_dir / "data"), str(out_dir)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith(_LISTENING):
                raise RuntimeError(f"broker did not start: {line!r}")
            bootstrap = line[len(_LISTENING) :].strip()
            topic = f"profile-{uuid.uuid4().hex[:8]}"
            admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([ck_admin.NewTopic(topic, partitions, 1)])[topic].result(30)

            def toggle(sig: int, expect: int | None = None) -> None:
                os.kill(proc.pid, sig)
                if expect is None:
                    time.sleep(0.2)
                    return
                marker = out_dir / "dumped"
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    with contextlib.suppress(FileNotFoundError, ValueError):
                        if int(marker.read_text()) >= expect:
                            return
                    time.sleep(0.05)
                raise RuntimeError("profile dump timed out")

            toggle(signal.SIGUSR1)
            elapsed = produce(bootstrap, topic, messages, partitions, batch_messages).seconds
            toggle(signal.SIGUSR2, 1)
            print(f"produce: {messages / elapsed:,.0f} msgs/s under the profiler")
            toggle(signal.SIGUSR1)
            count, elapsed = consume(bootstrap, topic, partitions)
            toggle(signal.SIGUSR2, 2)
            print(f"consume: {count / elapsed:,.0f} msgs/s under the profiler")
            _report(out_dir / "phase0.prof", f"produce, {partitions} partition(s)", top)
            _report(out_dir / "phase1.prof", f"fetch, {partitions} partition(s)", top)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--batch-messages", type=int, default=None, help="librdkafka batch.num.messages (fixes request size)"
    )
    args = parser.parse_args()
    drive(args.messages, args.partitions, args.top, args.batch_messages)


if __name__ == "__main__":
    main()
