"""core/contracts.py: what a job hands a decoder is found by protocol, and the shared loops open a
gate only for a decoder that asks for the guard and was handed one."""

from __future__ import annotations

import dataclasses

import torch

from dlmcode.core import contracts
from dlmcode.decoders import DECODERS, build
from dlmcode.text import oracle


def test_each_decoder_takes_what_its_fields_say():
    takes = {
        name: (
            isinstance(build(name), contracts.TakesAssistant),
            isinstance(build(name), contracts.TakesOracle),
            isinstance(build(name), contracts.Guarded),
        )
        for name in DECODERS
    }
    assert takes["codila"] == (True, False, True)
    assert takes["syntax-guard"] == (False, True, True)
    assert takes["low-confidence"] == (False, False, True)
    assert [n for n, (assistant, _, _) in takes.items() if assistant] == ["codila"]
    assert [n for n, (_, wants, _) in takes.items() if wants] == ["syntax-guard"]
    assert oracle.wants(build("syntax-guard")) and not oracle.wants(build("low-confidence"))


class Recorder:
    """A Completer that records the canvases it was asked to begin from."""

    def __init__(self) -> None:
        self.begun: list[torch.Tensor] = []

    def begin(self, canvas: torch.Tensor):
        self.begun.append(canvas)
        return "gate"


def test_a_gate_opens_only_for_a_guarded_decoder_with_a_completer():
    canvas = torch.tensor([1, 2, 3])
    completer = Recorder()
    plain = build("low-confidence")
    asked = dataclasses.replace(build("low-confidence", {"guard": True}), completer=completer)
    assert contracts.gate_for(plain, canvas) is None  # not asked for
    assert contracts.gate_for(dataclasses.replace(plain, completer=completer), canvas) is None  # handed, not asked
    assert contracts.gate_for(build("low-confidence", {"guard": True}), canvas) is None  # asked, none handed
    assert contracts.gate_for(asked, canvas) == "gate" and completer.begun == [canvas]
    assert contracts.gate_for(object(), canvas) is None and not contracts.guarded(object())  # a custom decoder


def test_the_decoder_recipe_in_docs_design_md_holds():
    """12 decoders write `choose`, 3 `revise`, and only codila, syntax-guard and renoise their own loop."""
    from dlmcode.decoders.base import BaseDecoder, Revising

    own_loop = {n for n, cls in DECODERS.items() if cls.__call__ not in (BaseDecoder.__call__, Revising.__call__)}
    revising = {n for n, cls in DECODERS.items() if issubclass(cls, Revising)} - own_loop
    choosing = set(DECODERS) - own_loop - revising
    assert own_loop == {"codila", "syntax-guard", "renoise"}
    assert revising == {"saber", "wino", "prophet"}
    assert len(choosing) == 12 and all(DECODERS[n].choose is not BaseDecoder.choose for n in choosing)
