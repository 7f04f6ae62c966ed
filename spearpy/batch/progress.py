"""The progress bar `spearpy batch` shows on stderr (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress


class BatchProgress:
    """Counts results as they arrive; a no-op when disabled (not a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Progress | None = None
        if enabled:
            # rich only when the bar is shown (a terminal), not in every batch.
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} not ok"), TimeElapsedColumn(),
                TimeRemainingColumn(), console=Console(stderr=True), transient=False)
        self._task: Any = None
        self._failed = 0

    def __enter__(self) -> BatchProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start(self, total: int, todo: int) -> None:
        if self._progress is not None:
            # Inputs done by an earlier run show as already complete.
            self._task = self._progress.add_task("batch", total=total, completed=total - todo,
                                                 failed=0)

    def advance(self, record: dict[str, Any]) -> None:
        if self._progress is None or self._task is None:
            return
        if record.get("outcome") != "exited" or record.get("exit_code") != 0:
            self._failed += 1
        self._progress.update(self._task, advance=1, failed=self._failed)
