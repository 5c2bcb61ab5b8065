"""The outcome of one load: what ``warm``, the CLI, the plugin and the lockfile report.

Why on the ground floor: the loader produces it and floors below the loader read it (the
lockfile records a served load from it), so it cannot live in the loader without an arrow back up.
"""
from __future__ import annotations

from .basis import Basis
from .events import Status
from .records import FrozenRecord


class WarmResult(FrozenRecord):
    """Outcome of building/loading one spec (what `warm`, the CLI and the plugin report)."""

    name: str
    status: Status  # a str: "hit" | "built" | "prebuilt" | "remote" | "failed" | "skipped"
    seconds: float
    reason: str = ""  # miss reason (why it was built / fetched) or failure message
    entry_id: str = ""
    entry_path: str = ""
    so_path: str = ""
    error: BaseException | None = None
    # what the answer rested on (``base.basis``): gathered by a load asked to record it (``recall``)
    rested_on: Basis | None = None

    def as_dict(self) -> dict:
        return {"name": self.name, "status": str(self.status), "seconds": round(self.seconds, 3),
                "reason": self.reason, "entry_id": self.entry_id, "entry_path": self.entry_path,
                "so_path": self.so_path}
