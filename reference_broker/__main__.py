"""``python -m reference_broker --data-dir DIR --port 9092``: run one broker until SIGTERM/SIGINT.

``python -m reference_broker configs`` lists every setting the broker accepts instead, and
``python -m reference_broker cluster --nodes 3 --data-dir D`` runs a local replicated cluster of
node processes (``reference_broker.cluster.launcher``).

The listening line on stdout is an interface: ``BrokerProcess`` waits for it to learn the port
when started with ``--port 0``, so it is printed only once the socket accepts connections, and
flushed. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from reference_broker._event_loop import EVENT_LOOPS, EventLoopError, loop_factory
from reference_broker._memory import keep_freed_memory
from reference_broker.config import BrokerConfig, ConfigError

LISTENING_PREFIX = "reference_broker listening on "


SETTINGS_HELP = """\
settings:
  The broker takes Apache Kafka's broker settings under Kafka's names (num.partitions,
  log.retention.hours, listeners, ...), from a .properties file (--config) and from
  --override KEY=VALUE (which wins over the file). An unknown or invalid setting is an error at
  start that names the setting (and, for an unknown one, the nearest valid name).

  python -m reference_broker configs [PATTERN ...] [--json]
      lists every setting with its type, default, valid values, whether it can be changed at
      run time (IncrementalAlterConfigs) and its documentation.
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reference_broker",
        description="Run one Kafka-compatible broker until SIGTERM or SIGINT.",
        epilog=SETTINGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data-dir", required=True, type=Path, help="where partitions are stored")
    parser.add_argument("--port", type=int, default=9092, help="TCP port (0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise")
    parser.add_argument("--node-id", type=int, default=None, help="broker id (default 1)")
    parser.add_argument("--config", type=Path, default=None, help="a Kafka-style .properties file")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="one broker setting, winning over the --config file (repeatable)",
    )
    parser.add_argument(
        "--event-loop",
        default="auto",
        choices=EVENT_LOOPS,
        help="asyncio event loop: uvloop where installed (auto), or the standard one",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        type=str.upper,
        help="stderr log level",
    )
    return parser.parse_args(argv)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def load_config(args: argparse.Namespace) -> BrokerConfig:
    common = dict(
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        node_id=args.node_id,
        log_level=args.log_level,
        event_loop=args.event_loop,
        properties=dict(args.override),
    )
    if args.config is not None:
        return BrokerConfig.from_file(args.config, **common)
    return BrokerConfig.build(**common)


async def serve(config: BrokerConfig) -> None:
    """Run until a signal arrives, then shut down cleanly (flush and close every log)."""
    from reference_broker.broker import Broker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Broker(config) as broker:
        print(f"{LISTENING_PREFIX}{broker.host}:{broker.port}", flush=True)
        await stop.wait()
        logging.getLogger("reference_broker").info("signal received, shutting down")


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["configs"]:
        from reference_broker.config_listing import main as list_configs

        return list_configs(arguments[1:])
    if arguments[:1] == ["cluster"]:
        from reference_broker.cluster.launcher import main as run_cluster

        return run_cluster(arguments[1:])
    args = parse_args(arguments)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_config(args)
    except ConfigError as exc:
        print(f"reference_broker: configuration error: {exc}", file=sys.stderr, flush=True)
        return 2
    keep_freed_memory()
    try:
        with asyncio.Runner(loop_factory=loop_factory(config.event_loop)) as runner:
            runner.run(serve(config))
    except (ConfigError, EventLoopError) as exc:
        print(f"reference_broker: configuration error: {exc}", file=sys.stderr, flush=True)
        return 2
    except OSError as exc:
        print(f"reference_broker: cannot start: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
