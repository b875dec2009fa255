"""The tool's output helpers: aligned tables with ``-`` for missing values, bytes in JSON as text
or base64, and the argument parser's exit code for a bad command line."""

from __future__ import annotations

import base64
import io

import pytest

from sdk.cli.main import build_parser, main
from sdk.cli.output import bytes_field, print_table


def test_table_columns_are_padded_to_their_widest_cell() -> None:
    out = io.StringIO()
    print_table(["TOPIC", "PARTITION", "LAG"], [["orders", 0, None], ["a-much-longer-name", 12, 3]], out)
    assert out.getvalue().splitlines() == [
        "TOPIC               PARTITION  LAG",
        "orders              0          -",
        "a-much-longer-name  12         3",
    ]


def test_bytes_are_text_when_utf8_and_base64_otherwise() -> None:
    assert bytes_field(None) == (None, None)
    assert bytes_field("café".encode()) == ("café", None)
    text, encoding = bytes_field(b"\xff\x00")
    assert encoding == "base64" and base64.b64decode(text or "") == b"\xff\x00"


def test_bad_command_lines_exit_with_the_usage_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["groups", "reset-offsets", "--group", "g", "--all-topics"])  # no --to-* target
    assert raised.value.code == 2
    assert "one of the arguments --to-earliest" in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        main(["consume", "--topic", "t", "--from-beginning", "--offset", "3"])
    assert raised.value.code == 2
    # Common options go before or after the subcommand.
    args = build_parser().parse_args(["-b", "h:1", "topics", "list", "--json"])
    assert (args.bootstrap_server, args.json) == ("h:1", True)
    args = build_parser().parse_args(["topics", "list", "--bootstrap-server", "h:2"])
    assert (args.bootstrap_server, args.json) == ("h:2", False)
