"""LoadReport: what loading a state_dict into a model matched (imports only :mod:`lit_gpu.messages`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lit_gpu.messages import shown as _shown

_MAX_LISTED = 3


@dataclass
class LoadReport:
    """What :func:`load_into` did."""

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shape_mismatches: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every key matched in name and shape."""
        return not (self.missing or self.unexpected or self.shape_mismatches)

    def summary(self) -> str:
        """One line: the counts and the first few keys of each kind of mismatch."""
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing ({_listing(self.missing)})")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected ({_listing(self.unexpected)})")
        if self.shape_mismatches:
            shapes = [
                f"{k}: checkpoint {tuple(a)} vs model {tuple(b)}"
                for k, (a, b) in self.shape_mismatches.items()
            ]
            parts.append(f"{len(shapes)} shape mismatch(es) ({_listing(shapes)})")
        return "; ".join(parts) if parts else f"all {len(self.loaded)} keys matched"


def _listing(items: list[str]) -> str:
    # keys come from the file: each one safe line (no escape sequences, no forged lines)
    listed = ", ".join(_shown(str(i), limit=120) for i in items[:_MAX_LISTED])
    return listed + (f", ... {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")
