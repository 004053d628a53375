"""`dlmcode train` and `dlmcode train-assistant`: the training loops, their progress drawn on
stderr (dlmcode/training does the work)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..core.entry import Command, reported
from .app import app
from .flags import Device, Model, Quiet
from .shared import emit


@app.command(cls=Command)
def train(
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option", "-o", help="training setting key=value (repeatable; see dlmcode/training/config.py TrainConfig)"
        ),
    ] = None,
    export: Annotated[
        str | None, typer.Option(help="after training, copy the best model here (bf16) with a model card")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Train the built-in dLLM (tokenizer and model) on this Python's standard library; resumes a run folder."""
    from ..training import train as training
    from . import view

    with reported():
        cfg = training.parse_overrides(option or [])
        last = view.follow_training(training.logged(cfg), view.console(quiet))
        if export:
            training.export(Path(cfg.out) / "best", export, card=training.model_card(cfg.out))
        emit(json.dumps(last))


# Its flags mirror `train`'s (an -o for its own config, --export): two configs, each flag's help names its own.
# train-assistant takes train's flags (-o, --export, --quiet) with its own help: one Typer parameter each
@app.command(name="train-assistant", cls=Command)
def train_assistant(
    model: Model = None,
    assistant: Annotated[
        str | None,
        typer.Option(help="Hugging Face causal LM to fine-tune (e.g. Qwen/Qwen3-0.6B) [default: a new tiny assistant]"),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            help="training setting key=value (repeatable; see AssistantTrainConfig in training/assistant_config.py)",
        ),
    ] = None,
    device: Device = "auto",
    export: Annotated[
        str | None, typer.Option(help="after training, copy the best assistant here with a model card")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Train CoDiLA's assistant for a dLLM (kept frozen) on block-masked canvases; resumes a run folder."""
    from ..training import train_assistant as training
    from . import view

    with reported():
        cfg = training.parse_overrides(option or [], model=model, assistant=assistant, device=device)
        last = view.follow_training(training.logged(cfg), view.console(quiet))
        if export:
            training.export(cfg.out, export)
        emit(json.dumps(last))
