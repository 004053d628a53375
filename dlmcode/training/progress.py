"""A training run's progress records, shared by both trainings: loss and throughput over the steps since
the last record (LogWindow), and every record appended to a JSONL file as it passes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path


class LogWindow:
    """Loss and throughput over the steps since the last log line (or checkpoint)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.t, self.tokens, self.loss, self.steps = time.perf_counter(), 0, 0.0, 0

    def add(self, tokens: int, loss: float) -> None:
        self.tokens, self.loss, self.steps = self.tokens + tokens, self.loss + loss, self.steps + 1

    def line(self, state: dict, **extra) -> dict:
        """The log event of the window that ends now; the next one starts."""
        seconds = time.perf_counter() - self.t
        loss, tok_s = self.loss / self.steps, self.tokens / seconds
        self.restart()
        return {"step": state["step"], "loss": loss, "tok_s": tok_s, "elapsed": state["elapsed"], **extra}


def appended(records: Iterator[dict], path: Path) -> Iterator[dict]:
    """Pass `records` through, appending each one to the JSONL file at `path` first."""
    for record in records:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
        yield record
