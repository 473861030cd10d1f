"""`dynamic`: static batching that waits for a full batch or a time window (§6).

As `static`, but a batch starts only when `max_rows` requests wait or the
oldest waiting request has waited `batch_window` (default 8, in the trace's
time unit, rounded up to whole clock steps): the
classic dynamic batcher of inference servers, trading queue delay for
fuller batches.
"""
from __future__ import annotations

from .static import StaticPolicy

__all__ = ["DynamicPolicy"]


class DynamicPolicy(StaticPolicy):
    """Static batching started by batch size or by the oldest request's wait."""

    name = "dynamic"

    def __init__(self, options, view) -> None:
        super().__init__(options, view)
        self.window = view.clock.after(options.batch_window)  # in clock steps

    def _oldest_wait(self) -> int:
        return min(r.wait_since for r in self.queue)

    def ready(self, now: int) -> bool:
        if not self.queue:
            return False
        if len(self.queue) >= min(self.options.max_rows, self.options.token_budget):
            return True
        return now - self._oldest_wait() >= self.window

    def next_wakeup(self, now: int) -> int | None:
        if self.batch or not self.queue:
            return None
        return self._oldest_wait() + self.window
