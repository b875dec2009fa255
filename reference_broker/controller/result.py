"""What a controller operation produces: records to append and the answer to give once committed."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class ControllerResult:
    """``records`` are appended to the metadata log as one batch (atomically); ``response`` is sent
    only after they are committed. An operation with no records is answered at once."""

    records: list[Any]
    response: Any = None
