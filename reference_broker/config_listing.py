"""``python -m reference_broker configs``: every setting the broker accepts, with its documentation.

The listing is read from the settings' single declaration (``BROKER_KEYS``, ``LISTENER_KEYS`` and
``MECHANISM_KEYS`` in :mod:`reference_broker.config`, the dynamic set in
:mod:`reference_broker.dynamic_config`), so a setting declared there is listed and one that is not
cannot be: there is no second list to keep in step.

Each entry has Kafka's facts about the setting: its type (as DescribeConfigs names it), default,
valid values, update mode (``read-only``: read at start; ``per-broker, cluster-wide``: changeable
at run time by IncrementalAlterConfigs for this broker or as the cluster default) and its
documentation. Settings Kafka also reads per listener are listed once, with the
``listener.name.<listener>.<setting>`` form they also take.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Iterable
from typing import Any

from reference_broker.config import BROKER_KEYS, LISTENER_KEYS, MECHANISM_KEYS, ConfigKey, render
from reference_broker.dynamic_config import DYNAMIC_KEYS

READ_ONLY = "read-only"
DYNAMIC = "per-broker, cluster-wide"
MECHANISM_FORM = "listener.name.<listener>.<mechanism>."


def setting_rows() -> list[dict[str, Any]]:
    """One row per accepted setting: the broker keys by name, then the per-mechanism keys of SASL
    listeners under their ``listener.name.<listener>.<mechanism>.`` form."""
    rows = [_row(key.name, key, key.name in DYNAMIC_KEYS) for _, key in sorted(BROKER_KEYS.items())]
    rows += [_row(MECHANISM_FORM + name, key, False) for name, key in sorted(MECHANISM_KEYS.items())]
    return rows


def _row(name: str, key: ConfigKey, dynamic: bool) -> dict[str, Any]:
    return {
        "name": name,
        "type": key.type.name.lower(),
        "default": render(key.default),
        "valid_values": key.valid_values,
        "update_mode": DYNAMIC if dynamic else READ_ONLY,
        "sensitive": key.sensitive,
        "per_listener": f"listener.name.<listener>.{key.name}" if key.name in LISTENER_KEYS else None,
        "documentation": key.doc,
    }


def render_text(rows: Iterable[dict[str, Any]], width: int = 100) -> str:
    """The rows as a reference page: the name, its documentation indented, then its facts."""
    blocks = []
    for row in rows:
        default = "null" if row["default"] is None else (row["default"] or '""')
        facts = [f"Type: {row['type']}", f"Default: {default}"]
        if row["valid_values"]:
            facts.append(f"Valid values: {row['valid_values']}")
        facts.append(f"Update mode: {row['update_mode']}")
        lines = [row["name"]]
        lines += textwrap.wrap(row["documentation"], width, initial_indent="    ", subsequent_indent="    ")
        lines += textwrap.wrap(" | ".join(facts), width, initial_indent="    ", subsequent_indent="      ")
        if row["per_listener"]:
            lines.append(f"    Also per listener: {row['per_listener']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reference_broker configs",
        description="List every setting the broker accepts (in --config files and --override).",
    )
    parser.add_argument(
        "pattern", nargs="*", help="show only settings whose name contains one of these"
    )
    parser.add_argument("--json", action="store_true", help="one JSON array of objects, for scripts")
    args = parser.parse_args(argv)
    rows = [r for r in setting_rows() if not args.pattern or any(p in r["name"] for p in args.pattern)]
    if not rows:
        parser.exit(1, f"no setting's name contains {' or '.join(map(repr, args.pattern))}\n")
    print(json.dumps(rows, indent=2) if args.json else render_text(rows), end="\n" if args.json else "")
    return 0
