"""``PreparedTxnState``: what identifies a prepared transaction across producers (KIP-939).

A producer with ``enable_two_phase_commit`` prepares its transaction (``prepare_transaction()``)
and an external coordinator (a database, Spark's commit log) stores the returned state next to
its own decision. After a crash, a new producer with the same transactional id keeps the prepared
transaction (``init_transactions(keep_prepared_transaction=True)``) and completes it with the
stored state: the transaction the broker kept is committed only if it is the one that state names,
so a state stored for an older transaction can never commit a newer one. The text form is Java's
``PreparedTxnState.toString()``: ``"producerId:epoch"``, empty when no transaction was open.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PreparedTxnState"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


@dataclass(frozen=True)
class PreparedTxnState:
    """The producer id and epoch of a prepared transaction; -1/-1 (``PreparedTxnState()``) when
    none was open."""

    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_PRODUCER_EPOCH

    def __post_init__(self) -> None:
        for name in ("producer_id", "epoch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"PreparedTxnState.{name} must be an int, not {value!r}")
        empty = (self.producer_id, self.epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not empty and (self.producer_id < 0 or not 0 <= self.epoch <= 32767):
            raise ValueError(
                f"PreparedTxnState needs a producer id >= 0 and an epoch in 0..32767 (or -1/-1 for "
                f"none), not {self.producer_id}:{self.epoch}"
            )

    @property
    def has_transaction(self) -> bool:
        """Whether this names a transaction (False for the empty state)."""
        return self.producer_id != NO_PRODUCER_ID

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}" if self.has_transaction else ""

    @classmethod
    def parse(cls, text: str | None) -> PreparedTxnState:
        """The state ``str(state)`` wrote: ``"producerId:epoch"``; ``""``, ``"none"`` or None give
        the empty state. Raises ``ValueError`` for anything else."""
        if text is None:
            return cls()
        stripped = text.strip()
        if stripped == "" or stripped.lower() == "none":
            return cls()
        producer_id, sep, epoch = stripped.partition(":")
        try:
            if not sep:
                raise ValueError
            return cls(int(producer_id), int(epoch))
        except ValueError:
            raise ValueError(f"not a prepared transaction state ('producerId:epoch'): {text!r}") from None
