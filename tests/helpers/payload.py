"""A pickle whose loading runs a command: what a weights-only load must refuse (shared by the tests)."""

from __future__ import annotations

import os
from pathlib import Path


class Payload:
    """Unpickled without the weights-only guard, it runs ``touch marker`` (the marker file proves it ran)."""

    def __init__(self, marker: Path | str) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))
