"""An anomaly as the checker reports it: its kind, what happened, and the operations that show it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.anomaly.history import Op


@dataclass
class Anomaly:
    kind: str
    message: str
    ops: list[Op] = field(default_factory=list)

    def render(self) -> str:
        return "\n".join([f"  {self.message}", *(f"      {op.describe()}" for op in self.ops)])
