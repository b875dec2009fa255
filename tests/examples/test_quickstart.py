"""The README's first command runs this demo; it must keep working end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_demo_round_trips_every_record() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--records", "300"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo OK" in result.stdout
    assert result.stdout.count("same records, same order") == 3
