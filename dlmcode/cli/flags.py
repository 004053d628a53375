"""The options several `dlmcode` commands share, declared once: the model, the decoder and its
settings, seed, device, cache, output. A command names them by these types (simonw/llm keeps its
shared options the same way), so a flag reads and checks the same in every command. The model's
six flags are one group (`model_flags`): a command that loads a model takes them as one
`ModelChoice`; `infill` and `generate` take their decode flags as one `Decode` (`decode_flags`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from ..core import settings
from ..core.entry import reported
from ..core.run import SEED_MAX, ModelChoice


def finite(value: float | None) -> float | None:
    """Typer callback: inf and nan are never a setting."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def seed_range(value: int) -> int:
    if not 0 <= value <= SEED_MAX:
        raise typer.BadParameter(f"{value} is out of range; give 0 to 2**63 - 1")
    return value


Source = Annotated[str, typer.Argument(help="a file, or - to read stdin", metavar="FILE")]


Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="model folder or Hugging Face hub id (downloaded once, then cached) [default: the built-in model]",
    ),
]


DecoderName = Annotated[
    str | None,
    typer.Option(
        "--decoder",
        "-d",
        help="decoder name (see `dlmcode decoders`) [default: the model family's own (`dlmcode models`): dynamic "
        "for SDAR and LLaDA2, subblocks for Fast-dLLM v2, renoise for DiffusionGemma, low-confidence for the others]",
    ),
]


Options = Annotated[
    list[str] | None,
    typer.Option("--option", "-o", help="decoder setting key=value (repeatable); guard=true unless guard=false"),
]


Seed = Annotated[int, typer.Option(help="seed of the decoder's random generator", callback=seed_range)]


Temperature = Annotated[
    float | None, typer.Option(help="sampling temperature; 0 = greedy [default: the decoder's]", callback=finite)
]


Device = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps")]


Dtype = Annotated[str, typer.Option(help="auto (bf16 on CUDA, fp32 elsewhere), float32, bfloat16, float16")]


Family = Annotated[str | None, typer.Option(help="model family, when detection from config.json is wrong")]


TrustRemoteCode = Annotated[bool, typer.Option(help="allow a model's own Python code to run")]


HoleLength = Annotated[
    str | None,
    typer.Option(
        help="tokens for the span or every bare ⟦fill⟧, or auto (the length rule sizes them from one probe call: "
        "docs/length.md) [default: the span's own token count; bare ⟦fill⟧ markers: the length rule]"
    ),
]
Lang = Annotated[
    str | None, typer.Option(help="language for syntax checks [default: from the file extension; python for stdin]")
]


Json = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout instead of the code")]


Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no live view or summary on stderr")]


Cache = Annotated[str, typer.Option(help="KV cache for block decoding: none, prefix or dual (Fast-dLLM; approximate)")]


CacheRefresh = Annotated[
    int, typer.Option(help="with --cache, also run every position every N calls; 0 = only when the block moves")
]


Offline = Annotated[
    bool, typer.Option("--offline", help="never download: a hub id must be in the local cache (also HF_HUB_OFFLINE=1)")
]


Decoders = Annotated[
    list[str] | None, typer.Option("--decoder", "-d", help="decoder to run (repeatable) [default: every decoder]")
]


MODEL = ModelChoice()  # a command's `choice` default: model_flags always passes the flags' own


@dataclass(frozen=True)
class Decode:
    """The decode flags of `infill` and `generate`, as RunSettings takes them."""

    decoder: str | None = None
    option: list[str] | None = None
    seed: int = 0
    temperature: float | None = None
    cache: str = "none"
    cache_refresh: int = 0

    def settings(self) -> dict[str, Any]:
        """RunSettings' decode fields; the -o pairs parsed (a bad one is a UsageError naming it), with the guard
        on unless they say guard=false: infill and generate are where a user wants code, a fill that parses
        (compare and bench measure each decoder's own breakage, unguarded unless set or swept)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "option"}
        return fields | {"options": {GUARD: "true", **self.asked()}}

    def asked(self) -> dict[str, str]:
        """The -o pairs as given."""
        return settings.parse_options(self.option)


GUARD = "guard"  # the decoder setting infill, generate and serve turn on unless told guard=false


DECODE = Decode()  # a command's `decode` default, as MODEL

Flag = tuple[str, Any, Any]  # (parameter, its type, default)
MODEL_FLAGS: tuple[Flag, ...] = (  # in ModelChoice's order
    ("model", Model, None),
    ("device", Device, "auto"),
    ("dtype", Dtype, "auto"),
    ("family", Family, None),
    ("trust_remote_code", TrustRemoteCode, False),
    ("offline", Offline, False),
)
DECODE_FLAGS: tuple[Flag, ...] = (  # in Decode's order
    ("decoder", DecoderName, None),
    ("option", Options, None),
    ("seed", Seed, 0),
    ("temperature", Temperature, None),
    ("cache", Cache, "none"),
    ("cache_refresh", CacheRefresh, 0),
)


def flag_group(param: str, record: Callable[..., Any], flags: tuple[Flag, ...]) -> Callable[..., Any]:
    """A decorator: the command's parameter `param` becomes `flags`, and the command gets them as one
    `record(*values)` (a bad value is one line, as every other setting)."""

    def grouped(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=t) for n, t, d in flags]
        params: list[inspect.Parameter] = []
        for given in signature.parameters.values():
            params += added if given.name == param else [given.replace(kind=inspect.Parameter.KEYWORD_ONLY)]

        @functools.wraps(command)
        def with_group(**values: Any) -> Any:
            with reported():
                built = record(*(values.pop(name) for name, _, _ in flags))
            return command(**{param: built}, **values)

        with_group.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        with_group.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
        del with_group.__wrapped__  # Typer reads the signature above, not the command's own
        return with_group

    return grouped


model_flags = flag_group("choice", ModelChoice, MODEL_FLAGS)  # --model, --device, --dtype, --family, ...
decode_flags = flag_group("decode", Decode, DECODE_FLAGS)  # --decoder, -o, --seed, --temperature, --cache, ...
