"""Every fenced code block of README.md either runs in CI or says why not.

The Python blocks run in order, each as its own process, against one embedded reference broker
(as a reader goes through the README top to bottom: the producer blocks write the ``events`` the
consumer blocks read). The broker's address replaces ``127.0.0.1:9092``/``localhost:9092``; a
block with a top-level ``await`` runs as in ``python -m asyncio``. Markers, on the line right
before a block's fence:

* ``<!-- not-run: reason -->``: not run (shell commands, or a block that needs what CI has not,
  e.g. a SparkSession); the reason is required.
* ``<!-- expect: regex -->``: the block's output must match ``regex`` (e.g. that a copy copied
  something).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reference_broker.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKER = re.compile(r"<!--\s*(not-run|expect):\s*(.*?)\s*-->")

#: Runs a block; a top-level ``await`` makes the compiled code a coroutine, run on a new loop.
RUNNER = """
import ast, asyncio, sys
path = sys.argv[1]
code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    not_run: str | None
    expect: str | None


def readme_blocks(text: str) -> list[Block]:
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        start = i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.search(lines[start - 1]) if start else None
        kind, value = (marker.group(1), marker.group(2)) if marker else (None, None)
        blocks.append(Block(
            line=start + 1, language=fence.group(1), text="\n".join(lines[start + 1:end]) + "\n",
            not_run=value if kind == "not-run" else None, expect=value if kind == "expect" else None,
        ))
        i = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text())
RUN = [b for b in BLOCKS if b.not_run is None]


def test_every_block_is_run_or_marked_with_a_reason() -> None:
    assert BLOCKS, "README.md has no code blocks?"
    for block in BLOCKS:
        where = f"README.md line {block.line} ({block.language or 'no language'})"
        if block.not_run is not None:
            assert block.not_run, f"{where}: a not-run marker needs a reason"
        else:
            assert block.language == "python", f"{where}: not Python; mark it <!-- not-run: reason -->"


def run_block(
    block: Block, bootstrap: str, workdir: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    source = block.text.replace("127.0.0.1:9092", bootstrap).replace("localhost:9092", bootstrap)
    path = workdir / f"readme_line_{block.line}.py"
    path.write_text(source)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-c", RUNNER, str(path)], cwd=workdir, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def readme_broker() -> Iterator[BrokerProcess]:
    with BrokerProcess() as proc:
        yield proc


@pytest.mark.timeout(180)
@pytest.mark.parametrize("block", RUN, ids=[f"line{b.line}" for b in RUN])
def test_readme_python_block_runs(block: Block, readme_broker: BrokerProcess, tmp_path: Path) -> None:
    result = run_block(block, readme_broker.bootstrap, tmp_path)
    report = f"README.md line {block.line}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, report
    if block.expect is not None:
        assert re.search(block.expect, result.stdout), report


TWO_PHASE = next(b for b in RUN if "enable_two_phase_commit=True" in b.text)


@pytest.mark.timeout(120)
def test_two_phase_block_on_a_broker_without_two_phase_commit_names_the_setting(tmp_path: Path) -> None:
    with BrokerProcess(config={"transaction.two.phase.commit.enable": "false"}) as broker:
        result = run_block(TWO_PHASE, broker.bootstrap, tmp_path)
    assert result.returncode != 0, result.stdout
    assert "transaction.two.phase.commit.enable" in result.stderr, result.stderr


#: What ``python -m reference_broker`` (the README's command) runs with, as Kafka: a new group
#: waits this long for more members before its first assignment.
KAFKA_INITIAL_REBALANCE_DELAY_MS = 3000


@pytest.mark.timeout(180)
def test_copy_blocks_copy_existing_input_on_a_broker_with_kafkas_group_delay(tmp_path: Path) -> None:
    """The exactly-once copy blocks, on a broker whose first rebalance waits 3 s (Kafka's
    ``group.initial.rebalance.delay.ms``): each copies the records already in ``events``."""
    copy_blocks = [b for b in RUN if b.expect is not None and "copied" in b.expect]
    assert len(copy_blocks) == 2
    settings = {"group.initial.rebalance.delay.ms": KAFKA_INITIAL_REBALANCE_DELAY_MS}
    with BrokerProcess(config=settings) as broker:
        producer_block = next(b for b in RUN if "send_and_wait(\"events\"" in b.text)
        for _ in range(3):
            assert run_block(producer_block, broker.bootstrap, tmp_path).returncode == 0
        for block in copy_blocks:
            result = run_block(block, broker.bootstrap, tmp_path)
            report = f"README.md line {block.line}: exit {result.returncode}\n{result.stdout}{result.stderr}"
            assert result.returncode == 0, report
            assert re.search(r"copied 3 records", result.stdout), report
