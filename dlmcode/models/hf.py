"""What the transformers-based families share: file checks, quiet offline loading, the
tokenizer wrapper, predict, and the remote-code policy with its one clear error.

transformers is imported inside functions only, so `import dlmcode.models` stays cheap.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.canvas import Predict, rowwise
from ..core.errors import ModelError
from . import forward
from .base import Dlm

WEIGHT_GLOBS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# the remote-code dLLMs were written and pinned for 4.x (docs/research/field.md A.4)
TRANSFORMERS_4 = 'pip install "transformers>=4.46,<5"'


def label(path: Path) -> str:
    """How to name a model folder in messages: the hub id for a Hugging Face cache snapshot, else the path."""
    repo = path.parent.parent.name  # .../models--org--name/snapshots/<hash>
    if path.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.removeprefix("models--").replace("--", "/")
    return str(path)


def read_config(path: Path) -> dict:
    """config.json of a model folder as a dict (the folder is known to have one)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelError(f"model folder {label(path)!r}: cannot read config.json ({first_line(err)})") from None
    if not isinstance(config, dict):
        raise ModelError(f"model folder {label(path)!r}: config.json is not a JSON object")
    return config


def check_folder(path: Path) -> None:
    """A ModelError naming everything a model folder lacks: config.json, weights, a tokenizer."""
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any(next(path.glob(g), None) for g in WEIGHT_GLOBS):
        missing.append("weights (*.safetensors or pytorch_model.bin)")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        missing.append(f"tokenizer ({' or '.join(TOKENIZER_FILES[:3])})")
    if missing:
        raise ModelError(f"model folder {label(path)!r} is incomplete: no {', no '.join(missing)}")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No progress bars ("Loading weights") or warnings from transformers on stderr while loading:
    it owns no output here. transformers' verbosity is process-wide, so it is restored after."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def transformers_major() -> int:
    return int(version("transformers").split(".")[0])


def pretrained_kwargs(dtype: torch.dtype, trust_remote_code: bool) -> dict[str, Any]:
    """from_pretrained arguments: offline always, an explicit trust_remote_code (None would prompt on stdin)."""
    key = "dtype" if transformers_major() >= 5 else "torch_dtype"  # 5.x deprecates torch_dtype
    return {key: dtype, "local_files_only": True, "trust_remote_code": bool(trust_remote_code)}


ALIGN = 64  # bytes: where torch's CPU allocator puts every tensor it makes


def aligned(model: Any) -> Any:
    """The model with every CPU parameter and buffer at an ALIGN-byte address, copied there if it is not.

    from_pretrained reads a safetensors file in place (mmap) when its dtype is the one asked for,
    so a tensor starts wherever the file's header left it; MKL's float32 matmul rounds a product
    with an unaligned operand differently in its last bits, so the same model loaded from a
    folder and built in memory (as transformers' own generate runs it) would not give the same
    logits (tests/test_diffusion_gemma.py). Tied parameters stay tied (one Parameter, copied once).
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.device.type == "cpu" and tensor.data_ptr() % ALIGN:
                tensor.data = tensor.data.clone()
    return model


def first_line(err: BaseException) -> str:
    """'Type: first line of the message', short enough for a one-line error."""
    lines = str(err).strip().splitlines() or [""]
    return f"{type(err).__name__}: {lines[0][:300]}"


def load_tokenizer(path: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    try:
        with quiet():
            return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=bool(trust_remote_code))
    except Exception as err:  # a corrupt tokenizer.json raises the tokenizers library's bare Exception
        raise ModelError(f"model {label(path)!r}: cannot load its tokenizer ({first_line(err)})") from None


@dataclass(frozen=True)
class HfTokenizer:
    """A transformers tokenizer behind models.base.Tokenizer: no special tokens added, spaces kept as written."""

    hf: Any  # the transformers tokenizer (chat templates, special tokens)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def token_id(hf: Any, token: str) -> int | None:
    """The id of `token` if the tokenizer knows it as a whole token, else None."""
    return hf.get_vocab().get(token)


def first_id(*candidates: Any, vocab_size: int) -> int | None:
    """The first candidate that is a valid id for this model (fallback constants may not fit a small vocabulary)."""
    ids = (as_id(c) for c in candidates)
    return next((i for i in ids if i is not None and 0 <= i < vocab_size), None)


def chat_fn(hf: Any, bos_id: int | None) -> Callable[[str], str] | None:
    """Wraps a request in the tokenizer's chat template; None when it has none (base models).

    A template that writes the BOS token itself (Llama-3 style, as LLaDA's) would double it,
    since the canvas already starts with bos_id: it is dropped from the text.
    """
    if not getattr(hf, "chat_template", None):
        return None
    bos = hf.bos_token if bos_id is not None and hf.bos_token else None

    def chat(request: str) -> str:
        text = hf.apply_chat_template(
            [{"role": "user", "content": request}], add_generation_prompt=True, tokenize=False
        )
        return text.removeprefix(bos) if bos else text

    return chat


def special_ids(hf: Any, *ids: int | None) -> frozenset[int]:
    return frozenset(hf.all_special_ids) | {i for i in ids if i is not None}


def framing(hf: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text by default ([CLS] ... [SEP] for BERT)."""
    bare, full = hf.encode("a", add_special_tokens=False), hf.encode("a")
    for i in range(len(full) - len(bare) + 1):
        if full[i : i + len(bare)] == bare:
            return full[:i], full[i + len(bare) :]
    return [], []


def bos_of(frame: tuple[list[int], list[int]]) -> int | None:
    """Dlm.bos_id: the one token the tokenizer puts first, so canvases start as the model saw its training text."""
    return frame[0][0] if len(frame[0]) == 1 else None


def make_predict(
    model: Any, align: Callable[[Tensor], Tensor] | None = None, frame: tuple[list[int], list[int]] = ([], [])
) -> Predict:
    """(L,) ids -> (L, V) float32 logits on the model's device, row i scoring position i.

    `frame` is the (prefix, suffix) of special tokens the model was trained to see around its
    input (BERT's [CLS] ... [SEP]): predict adds whichever the canvas lacks and cuts their rows
    off again. `align` undoes a logit shift.
    """
    device = next(model.parameters()).device
    head, tail = (torch.tensor(ids, dtype=torch.long, device=device) for ids in frame)

    def predict(tokens: Tensor, rows: Tensor | None = None) -> Tensor:
        ids = tokens.to(device, torch.long)
        pre, post = framed(ids, head, tail)
        with torch.inference_mode():
            logits = model(input_ids=torch.cat([pre, ids, post])[None]).logits[0]  # (L + framing, V)
            logits = (align(logits) if align else logits)[len(pre) : len(pre) + len(ids)]  # (L, V)
            logits = logits if rows is None else logits[rows.to(device)]  # (R, V): the float copy of these only
        return logits.to(torch.float32, copy=True)  # made outside inference mode: callers may edit it in place

    return rowwise(predict)


def framed(ids: Tensor, head: Tensor, tail: Tensor) -> tuple[Tensor, Tensor]:
    """The framing tokens `ids` lacks: (prefix, suffix), each either all of head/tail or empty."""
    pre = head if len(head) and not torch.equal(ids[: len(head)], head) else head[:0]
    post = tail if len(tail) and not torch.equal(ids[len(ids) - len(tail) :], tail) else tail[:0]
    return pre, post


def make_forward_batch(
    model: Any,
    pad_id: int,
    align: Callable[[Tensor], Tensor] | None = None,
    frame: tuple[list[int], list[int]] = ([], []),
) -> Callable[[list[Tensor]], list[Tensor]]:
    """make_predict for several canvases in one forward (models/forward.py): each framed as predict
    frames it, right-padded with `pad_id` and hidden by attention_mask, its rows aligned and cut back."""
    device = next(model.parameters()).device
    head, tail = (torch.tensor(ids, dtype=torch.long, device=device) for ids in frame)

    def forward_batch(seqs: list[Tensor], wanted: list[Tensor | None] | None = None) -> list[Tensor]:
        seqs = [s.to(device, torch.long) for s in seqs]
        frames = [framed(s, head, tail) for s in seqs]
        ids, keep = forward.pad(
            [torch.cat([pre, s, post]) for s, (pre, post) in zip(seqs, frames, strict=True)], pad_id
        )  # (B, P)
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=keep.long()).logits  # (B, P, V)
        rows = []
        for i, (s, (pre, post)) in enumerate(zip(seqs, frames, strict=True)):
            row = logits[i, : len(pre) + len(s) + len(post)]  # this canvas's own positions, framing included
            row = (align(row) if align else row)[len(pre) : len(pre) + len(s)]  # (L_i, V)
            picked = None if wanted is None else wanted[i]
            rows.append((row if picked is None else row[picked.to(device)]).to(torch.float32, copy=True))  # (R_i, V)
        return rows

    return rowwise(forward_batch)


def remote_code_error(path: Path, family: str, detail: str | None = None) -> ModelError:
    """The one clear error for a family that runs only on its published (hub) modelling code."""
    name = label(path)
    if detail is None:
        msg = (
            f"model {name!r} is {family}, which runs only on its published modelling code: pass --trust-remote-code "
            "to allow it"
        )
    else:
        msg = f"model {name!r}: {family}'s published modelling code failed to load ({detail})"
    if transformers_major() >= 5:
        example = "" if detail else " (AttributeError 'all_tied_weights_keys')"
        msg += (
            ". That code was written for transformers 4.x and breaks under the installed "
            f"{version('transformers')}{example},"
            f" so for now run dlmcode in a separate environment with `{TRANSFORMERS_4}` until native {family} support "
            "lands"
        )
    return ModelError(msg)


def require_remote_code(path: Path, family: str, config: dict, trust_remote_code: bool) -> None:
    """Refuse before loading anything unless the user trusts the folder's code and the folder has some."""
    if not trust_remote_code:
        raise remote_code_error(path, family)
    if "AutoModel" not in (config.get("auto_map") or {}):
        raise ModelError(
            f"model {label(path)!r} is {family}, but its config.json has no auto_map.AutoModel: there is no modelling "
            "code to run"
        )


def load_remote_tokenizer(path: Path, family: str) -> Any:
    """The tokenizer of a remote-code family, which may itself be remote code (Dream's tokenization_dream.py)."""
    from transformers import AutoTokenizer

    try:
        with quiet():
            return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=True)
    except Exception as err:  # as for the model: any failure of the published code ends in the one clear error
        raise remote_code_error(path, family, f"tokenizer: {first_line(err)}") from None


def load_remote(path: Path, family: str, device: torch.device, dtype: torch.dtype) -> Any:
    """AutoModel on the folder's own modelling code (config.json auto_map), in eval mode on `device`."""
    from transformers import AutoModel

    try:
        with quiet():
            model = AutoModel.from_pretrained(path, **pretrained_kwargs(dtype, True))
    except torch.OutOfMemoryError:
        raise
    except Exception as err:  # remote code breaks in many ways under transformers 5 (AttributeError, KeyError, ...)
        raise remote_code_error(path, family, first_line(err)) from None
    return model.to(device).eval()


def vocab_size(model: Any) -> int:
    """Rows of the model's logits, from its config (remote-code configs name it differently)."""
    cfg = model.config
    return int(getattr(cfg, "vocab_size", None) or getattr(cfg, "embedding_size", None) or 2**31)


def as_id(value: Any) -> int | None:
    """A config's token id field: an int, or a list of ints (take the first)."""
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def require_mask(path: Path, mask_id: int | None) -> int:
    if mask_id is None:
        raise ModelError(
            f"model {label(path)!r}: no usable mask token (none named by its tokenizer or config.json fits its "
            "vocabulary),"
            " so it cannot fill holes"
        )
    return mask_id


def adapt(
    path: Path,
    config: dict,
    tok: Any,
    vocab: int,
    predict: Predict,
    device: torch.device,
    dtype: torch.dtype,
    *,
    family: str,
    context: int,
    mask_id: int,
    eos_id: int,
    eot_token: str,
    eot_id: int | None = None,
    pad_token: str | None = None,
) -> Dlm:
    """The Dlm around a hub dLLM (LLaDA, Dream): special ids from the tokenizer and config.json first, then the
    family's published ones (`mask_id`, `eos_id`, `eot_id`; `eot_token` and `pad_token` are looked up by name)."""
    bos = bos_of(framing(tok))
    mask = require_mask(path, first_id(tok.mask_token_id, config.get("mask_token_id"), mask_id, vocab_size=vocab))
    eos = first_id(config.get("eos_token_id"), token_id(tok, "<|endoftext|>"), eos_id, vocab_size=vocab)
    pad = first_id(
        token_id(tok, pad_token) if pad_token else None, tok.pad_token_id, config.get("pad_token_id"), vocab_size=vocab
    )
    eot = first_id(token_id(tok, eot_token), eot_id, vocab_size=vocab)
    return Dlm(
        name=label(path),
        family=family,
        tokenizer=HfTokenizer(tok),
        mask_id=mask,
        eos_id=eos,
        pad_id=pad,
        bos_id=bos,
        context=context,
        predict=predict,
        device=device,
        dtype=dtype,
        chat=chat_fn(tok, bos),
        special_ids=special_ids(tok, mask, eos, eot, pad, bos),
        eot_id=eot,
    )
