"""The model layer: tiny models and fake family folders built in the test; downloads only from a
fake hub on 127.0.0.1 (HF_ENDPOINT), in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"  # a cache miss must never wait on the network

from dlmcode import models
from dlmcode.core.errors import ModelError, UsageError
from dlmcode.models import dream, hf

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n\tprint(i, end='')\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
    "if (x  >=  1) and not y:\n    z = {'k': [1, 2, 3]}\n",
]


def bpe(specials: list[str], template: str | None = None, **roles: str):
    """A tiny byte-level BPE tokenizer trained here, wrapped for transformers; `roles` name special tokens,
    `template` is what it wraps a text in by default ("[CLS] $A [SEP]")."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(tm.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CODE * 10, trainer)
    if template:
        from tokenizers.processors import TemplateProcessing

        used = [t for t in specials if t in template.split()]
        tok.post_processor = TemplateProcessing(single=template, special_tokens=[(t, tok.token_to_id(t)) for t in used])
    return PreTrainedTokenizerFast(tokenizer_object=tok, **roles)


def small(config_cls, vocab: int, **extra):
    sizes = {
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    return config_cls(vocab_size=vocab, **sizes, **extra)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    from transformers import BertConfig, BertForMaskedLM

    tok = bpe(
        ["[PAD]", "[CLS]", "[SEP]", "[MASK]"],
        "[CLS] $A [SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("bert")
    BertForMaskedLM(small(BertConfig, len(tok), pad_token_id=0)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory) -> Path:
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    tok = bpe(["[PAD]", "[MASK]", "[EOS]"], pad_token="[PAD]", mask_token="[MASK]", eos_token="[EOS]")
    ids = {"pad_token_id": 0, "bos_token_id": None, "eos_token_id": 2, "cls_token_id": None, "sep_token_id": None}
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("modernbert")
    ModernBertForMaskedLM(small(ModernBertConfig, len(tok), **ids)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


MODELING = """
import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput


class ToyConfig(PretrainedConfig):
    model_type = "{model_type}"

    def __init__(self, vocab_size=64, hidden_size=8, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class ToyModel(PreTrainedModel):
    config_class = ToyConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        {post_init}

    def forward(self, input_ids, attention_mask=None, **kwargs):
        h = self.embed(input_ids)
        h = h + self.mix(h.mean(dim=1, keepdim=True))  # every position sees all others: bidirectional
        return MaskedLMOutput(logits=self.head(h))
"""


def remote_folder(path: Path, model_type: str, arch: str, tok, config: dict, post_init: bool = True) -> Path:
    """A hub-style folder whose config.json auto_map points at modelling code written here."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    skip = "pass  # like LLaDAModelLM: no post_init (docs/research/field.md A.4.1)"
    code = MODELING.format(model_type=model_type, post_init="self.post_init()" if post_init else skip)
    (path / "modeling_toy.py").write_text(code)
    torch.manual_seed(0)
    state = {  # the ToyModel parameters, made without running the (maybe broken) class
        "embed.weight": torch.randn(len(tok), 8),
        "mix.weight": torch.randn(8, 8),
        "mix.bias": torch.randn(8),
        "head.weight": torch.randn(len(tok), 8),
        "head.bias": torch.randn(len(tok)),
    }
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    auto_map = {"AutoConfig": "modeling_toy.ToyConfig", "AutoModel": "modeling_toy.ToyModel"}
    full = {
        "model_type": model_type,
        "architectures": [arch],
        "auto_map": auto_map,
        "vocab_size": len(tok),
        "hidden_size": 8,
        **config,
    }
    (path / "config.json").write_text(json.dumps(full))
    tok.save_pretrained(path)
    return path


def dream_folder(path: Path) -> Path:
    specials = ["<|endoftext|>", "<|mask|>", "<|im_end|>", "<|dlm_pad|>"]
    tok = bpe(specials, eos_token="<|endoftext|>", mask_token="<|mask|>", pad_token="<|endoftext|>")
    config = {"mask_token_id": 1, "eos_token_id": 0, "pad_token_id": 0, "max_position_embeddings": 131072}
    return remote_folder(path, "Dream", "DreamModel", tok, config)


CHAT = (
    "{{ bos_token }}{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def llada_folder(path: Path, post_init: bool = True) -> Path:
    specials = ["<|endoftext|>", "<|mdm_mask|>", "<|eot_id|>", "<|startoftext|>"]
    tok = bpe(
        specials, "<|startoftext|> $A", bos_token="<|startoftext|>", eos_token="<|endoftext|>"
    )  # no mask_token: config.json has it
    tok.chat_template = CHAT
    config = {"mask_token_id": 1, "eos_token_id": 0, "pad_token_id": 0, "max_sequence_length": 4096}
    return remote_folder(path, "llada", "LLaDAModelLM", tok, config, post_init)


@pytest.fixture(scope="module")
def dream_dir(tmp_path_factory) -> Path:
    return dream_folder(tmp_path_factory.mktemp("dream") / "Dream-toy")


@pytest.fixture
def no_stdin(monkeypatch):
    """Reading stdin fails the test: transformers prompts there when trust_remote_code is None."""

    class Closed:
        def readline(self, *a):
            raise AssertionError("read stdin")

        read = readline

    monkeypatch.setattr(sys, "stdin", Closed())


def auto_model(path: Path, masked: bool = True):
    from transformers import AutoModel, AutoModelForMaskedLM

    cls = AutoModelForMaskedLM if masked else AutoModel
    return cls.from_pretrained(path, local_files_only=True, trust_remote_code=not masked).eval()


# masked-lm


def test_bert_is_masked_lm_and_predict_matches_the_model_with_its_framing(bert_dir):
    dlm = models.load(str(bert_dir), device="cpu")
    assert (dlm.family, dlm.name, dlm.device, dlm.dtype) == (
        "masked-lm",
        str(bert_dir),
        torch.device("cpu"),
        torch.float32,
    )
    tok = dlm.tokenizer.hf
    assert dlm.mask_id == tok.mask_token_id == 3 and dlm.pad_id == 0 and dlm.eos_id == tok.sep_token_id
    assert dlm.context == 64 - 2  # [CLS] and [SEP] take two positions
    ids = torch.tensor(dlm.tokenizer.encode(CODE[0]))
    ids[2:5] = dlm.mask_id
    logits = dlm.predict(ids)
    assert logits.shape == (len(ids), len(tok)) and logits.dtype == torch.float32
    framed = torch.cat([torch.tensor([tok.cls_token_id]), ids, torch.tensor([tok.sep_token_id])])
    with torch.no_grad():
        own = auto_model(bert_dir)(input_ids=framed[None]).logits[0, 1:-1]
    torch.testing.assert_close(logits, own)
    logits[0, 0] = 0.0  # decoders may edit the returned logits in place


def test_bert_predict_adds_only_the_framing_the_canvas_lacks(bert_dir):
    dlm = models.load(str(bert_dir), device="cpu")
    cls, sep = dlm.tokenizer.hf.cls_token_id, dlm.tokenizer.hf.sep_token_id
    assert (dlm.bos_id, dlm.eos_id) == (cls, sep)  # spans starts (and, with the whole file, ends) canvases with them
    body = torch.tensor(dlm.tokenizer.encode(CODE[3]))
    full = torch.cat([torch.tensor([cls]), body, torch.tensor([sep])])
    with torch.no_grad():
        own = auto_model(bert_dir)(input_ids=full[None]).logits[0]  # (L + 2, V)
    torch.testing.assert_close(dlm.predict(full), own)  # nothing added
    torch.testing.assert_close(dlm.predict(full[:-1]), own[:-1])  # a windowed canvas: only [SEP] added
    torch.testing.assert_close(dlm.predict(body), own[1:-1])


def test_modernbert_predict_equals_the_model_own_logits(modernbert_dir):
    dlm = models.load(str(modernbert_dir), device="cpu", dtype="fp32")
    assert dlm.family == "masked-lm" and dlm.chat is None and dlm.eot_id is None
    assert (dlm.mask_id, dlm.pad_id, dlm.eos_id, dlm.context) == (1, 0, 2, 64)
    assert {0, 1, 2} <= dlm.special_ids
    ids = torch.tensor(dlm.tokenizer.encode(CODE[2]))
    ids[::3] = dlm.mask_id
    with torch.no_grad():
        own = auto_model(modernbert_dir)(input_ids=ids[None]).logits[0]
    assert dlm.predict(ids).shape == (len(ids), dlm.tokenizer.hf.vocab_size)
    torch.testing.assert_close(dlm.predict(ids), own)


def test_context_is_the_longest_canvas_the_model_takes(tmp_path, bert_dir):
    from transformers import RobertaConfig, RobertaForMaskedLM

    tok = bpe(
        ["<s>", "<pad>", "</s>", "<mask>"],
        "<s> $A </s>",
        cls_token="<s>",
        pad_token="<pad>",
        sep_token="</s>",
        mask_token="<mask>",
    )
    RobertaForMaskedLM(small(RobertaConfig, len(tok), pad_token_id=1)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    roberta = models.load(str(tmp_path), device="cpu")
    assert roberta.context == 64 - 2 - 2  # positions start at padding_idx + 1; <s> and </s> take two
    for dlm in (roberta, models.load(str(bert_dir), device="cpu")):
        assert dlm.predict(torch.full((dlm.context,), dlm.mask_id)).shape == (dlm.context, len(dlm.tokenizer.hf))


def test_tokenizer_round_trips_code_without_special_tokens(bert_dir):
    tok = models.load(str(bert_dir), device="cpu").tokenizer
    for code in CODE:
        ids = tok.encode(code)
        assert 1 not in ids and 2 not in ids  # no [CLS] / [SEP] added
        assert tok.decode(ids) == code


def test_loading_prints_nothing(bert_dir, capfd):
    capfd.readouterr()
    models.load(str(bert_dir), device="cpu")
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # no "Loading weights" bars, no config warnings


def test_a_checkpoint_without_its_masked_lm_head_is_refused(tmp_path, bert_dir):
    from transformers import BertConfig, BertModel

    tok = bpe(["[PAD]", "[MASK]"], pad_token="[PAD]", mask_token="[MASK]")
    BertModel(small(BertConfig, len(tok))).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="cannot tell which model family .*--family"):
        models.load(str(tmp_path), device="cpu")  # architectures: ["BertModel"]
    with pytest.raises(ModelError, match="lacks .* masked-LM weight"):
        models.load(str(tmp_path), device="cpu", family="masked-lm")


def test_a_tokenizer_without_a_mask_token_is_refused(tmp_path, bert_dir):
    for f in ("config.json", "model.safetensors"):
        (tmp_path / f).write_bytes((bert_dir / f).read_bytes())
    bpe(["[PAD]"], pad_token="[PAD]").save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="tokenizer has no mask token"):
        models.load(str(tmp_path), device="cpu")


# dream


def test_dream_align_is_dreams_own_shift():
    logits = torch.arange(5 * 3, dtype=torch.float32).view(5, 3)  # (L, V)
    aligned = dream.align(logits)
    assert torch.equal(aligned[0], logits[0]) and torch.equal(aligned[1:], logits[:-1])
    batched = logits[None]  # Dream's sampler works on (B, L, V)
    assert torch.equal(aligned, torch.cat([batched[:, :1], batched[:, :-1]], dim=1)[0])


def test_dream_without_trust_remote_code_is_one_clear_error(dream_dir, no_stdin, monkeypatch):
    """Refused from config.json alone: no tokenizer, no weights and no remote code are read first."""
    from dlmcode.models import native

    read = []
    for module, name in (
        (hf, "load_remote"),
        (hf, "load_remote_tokenizer"),
        (dream, "load_tokenizer"),
        (native, "read_state"),
    ):
        monkeypatch.setattr(module, name, lambda *a, name=name, **k: read.append(name))
    with pytest.raises(ModelError) as err:
        models.load(str(dream_dir), device="cpu")
    msg = str(err.value)
    assert "is Dream" in msg and "--trust-remote-code" in msg and "\n" not in msg
    assert 'pip install "transformers>=4.46,<5"' in msg and "all_tied_weights_keys" in msg
    assert read == []


def test_dream_with_remote_code_loads_and_predict_is_aligned(dream_dir, no_stdin):
    dlm = models.load(str(dream_dir), device="cpu", trust_remote_code=True)
    tok = dlm.tokenizer.hf
    assert dlm.family == "dream"
    assert dlm.mask_id == tok.convert_tokens_to_ids("<|mask|>") == 1
    assert dlm.pad_id == tok.convert_tokens_to_ids("<|dlm_pad|>")  # DiffuCoder's pad wins over <|endoftext|>
    assert (dlm.eos_id, dlm.eot_id) == (0, tok.convert_tokens_to_ids("<|im_end|>"))
    assert dlm.context == dream.DREAM_CONTEXT  # capped: config.json says 131072
    ids = torch.tensor(dlm.tokenizer.encode(CODE[1]))
    ids[3:6] = dlm.mask_id
    with torch.no_grad():
        raw = auto_model(dream_dir, masked=False)(input_ids=ids[None]).logits  # (1, L, V)
    expected = torch.cat([raw[:, :1], raw[:, :-1]], dim=1)[0]
    torch.testing.assert_close(dlm.predict(ids), expected)
    assert not torch.allclose(dlm.predict(ids), raw[0])


def test_dream_folder_without_modelling_code_is_refused(tmp_path, dream_dir):
    path = dream_folder(tmp_path / "no-code")
    config = json.loads((path / "config.json").read_text())
    del config["auto_map"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="no auto_map.AutoModel"):
        models.load(str(path), device="cpu", trust_remote_code=True)


def test_dream_tokenizer_remote_code_failing_is_the_same_clear_error(tmp_path, no_stdin):
    path = dream_folder(tmp_path / "Dream-bad-tokenizer")
    broken = """
        from transformers import PreTrainedTokenizerFast

        class ToyTokenizer(PreTrainedTokenizerFast):
            def __init__(self, *a, **k):
                raise AttributeError("no attribute special_tokens_map_extended")
    """
    (path / "tokenization_toy.py").write_text(textwrap.dedent(broken))
    config = json.loads((path / "tokenizer_config.json").read_text())
    config |= {
        "tokenizer_class": "ToyTokenizer",
        "auto_map": {"AutoTokenizer": [None, "tokenization_toy.ToyTokenizer"]},
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(
        ModelError, match=r"Dream's published modelling code failed to load \(tokenizer: AttributeError: no attribute"
    ):
        models.load(str(path), device="cpu", trust_remote_code=True)


# llada


def test_llada_without_trust_remote_code_is_one_clear_error(tmp_path, no_stdin):
    path = llada_folder(tmp_path / "LLaDA-toy")
    with pytest.raises(ModelError, match=r"is LLaDA.*--trust-remote-code.*transformers>=4\.46,<5"):
        models.load(str(path), device="cpu")


def test_llada_with_remote_code_loads_in_place_with_ids_and_chat(tmp_path, no_stdin):
    path = llada_folder(tmp_path / "LLaDA-toy")
    dlm = models.load(str(path), device="cpu", trust_remote_code=True)
    tok = dlm.tokenizer.hf
    assert dlm.family == "llada" and dlm.context == 4096
    assert (dlm.mask_id, dlm.eos_id, dlm.eot_id) == (
        1,
        0,
        tok.convert_tokens_to_ids("<|eot_id|>"),
    )  # from config and tokenizer
    assert dlm.bos_id == tok.bos_token_id == 3  # the tokenizer starts every text with it
    assert (
        dlm.chat("sort a list") == "<user>sort a list</user><assistant>"
    )  # the template's own BOS dropped: no double BOS
    ids = torch.tensor(dlm.tokenizer.encode(CODE[0]))
    with torch.no_grad():
        raw = auto_model(path, masked=False)(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(dlm.predict(ids), raw)  # no shift for LLaDA


def test_llada_remote_code_breaking_under_transformers_5_is_one_clear_error(tmp_path, no_stdin):
    path = llada_folder(tmp_path / "LLaDA-broken", post_init=False)
    with pytest.raises(ModelError) as err:
        models.load(str(path), device="cpu", trust_remote_code=True)
    msg = str(err.value)
    assert "LLaDA's published modelling code failed to load" in msg and "\n" not in msg
    if hf.transformers_major() >= 5:
        assert "all_tied_weights_keys" in msg and 'pip install "transformers>=4.46,<5"' in msg


# detection


@pytest.mark.parametrize(
    ("config", "family"),
    [
        ({"model_type": "dlmcode"}, "builtin"),
        ({"model_type": "llada"}, "llada"),
        ({"model_type": "LLaDA", "architectures": ["LLaDAModelLM"]}, "llada"),
        ({"architectures": ["LLaDAModelLM"]}, "llada"),
        ({"model_type": "Dream", "architectures": ["DreamModel"]}, "dream"),
        ({"model_type": "dream"}, "dream"),
        ({"auto_map": {"AutoModel": "modeling_dream.DreamModel"}}, "dream"),
        ({"model_type": "qwen2", "mask_token_id": 151666}, "dream"),
        ({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, "masked-lm"),
        ({"model_type": "modernbert"}, "masked-lm"),
        ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, None),
        ({"model_type": "gpt2"}, None),
    ],
)
def test_family_detection_from_config(tmp_path, config, family):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if family is None:
        with pytest.raises(ModelError, match="--family, one of " + ", ".join(models.FAMILIES)):
            models.detect(tmp_path)
    else:
        assert models.detect(tmp_path) == family


def test_family_override_wins_over_detection(dream_dir, no_stdin):
    with pytest.raises(ModelError, match="is LLaDA"):
        models.load(str(dream_dir), device="cpu", family="llada")


# names, devices, dtypes


def test_missing_folder():
    with pytest.raises(ModelError, match="no such model folder: ./no/such/model"):
        models.load("./no/such/model", device="cpu")


def test_a_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ModelError, match="is a file, not a model folder"):
        models.load(str(tmp_path / "weights.bin"), device="cpu")


def test_empty_folder_names_everything_missing(tmp_path):
    with pytest.raises(ModelError, match=r"is incomplete: no config.json, no weights .*, no tokenizer"):
        models.load(str(tmp_path), device="cpu")


def test_folder_with_config_only_names_weights_and_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ModelError) as err:
        models.load(str(tmp_path), device="cpu")
    assert "no weights" in str(err.value) and "no tokenizer" in str(err.value) and "config.json" not in str(err.value)


def test_bad_config_json(tmp_path, bert_dir):
    for f in ("model.safetensors", "tokenizer.json"):
        (tmp_path / f).write_bytes((bert_dir / f).read_bytes())
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read config.json"):
        models.load(str(tmp_path), device="cpu")


def test_uncached_hub_id_fails_at_once_with_one_line(monkeypatch):
    """Offline, an id missing from the cache is refused without a download or any connection being tried."""
    import socket

    tried = []
    monkeypatch.setattr(models, "download", lambda *a, **k: tried.append("download"))
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: tried.append(address))
    with pytest.raises(ModelError) as err:
        models.load("dlmcode-tests/not-a-cached-model", device="cpu")
    assert tried == []
    msg = str(err.value)
    assert "not a local folder and is not in the Hugging Face cache, and downloads are off (HF_HUB_OFFLINE=1)" in msg
    assert "`hf download dlmcode-tests/not-a-cached-model`" in msg and "\n" not in msg


class FakeHub:
    """The few Hugging Face Hub endpoints snapshot_download uses, serving one repo from a folder on 127.0.0.1."""

    REPO, SHA = "dlmcode-tests/tiny", "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, folder: Path) -> None:
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hub, self.requests = self, []
        self.files = {p.name: p.read_bytes() for p in folder.iterdir()}
        self.oids = {name: hashlib.sha1(data).hexdigest() for name, data in self.files.items()}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                hub.requests.append((self.command, self.path))

            def do_HEAD(self):
                self.reply(head=True)

            def do_GET(self):
                self.reply(head=False)

            def reply(self, head: bool) -> None:
                body, headers = hub.answer(self.path)
                self.send_response(200 if body is not None else 404)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                if body and not head:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str) -> tuple[bytes | None, dict[str, str]]:
        api, resolve = f"/api/models/{self.REPO}", f"/{self.REPO}/resolve/"
        if path.startswith(f"{api}/tree/"):
            tree = [{"type": "file", "path": n, "size": len(d), "oid": self.oids[n]} for n, d in self.files.items()]
            return json.dumps(tree).encode(), {"Content-Type": "application/json"}
        if path.startswith(f"{api}/revision/"):
            info = {"id": self.REPO, "sha": self.SHA, "siblings": [{"rfilename": n} for n in self.files]}
            return json.dumps(info).encode(), {"Content-Type": "application/json"}
        name = path[len(resolve) :].partition("/")[2] if path.startswith(resolve) else None
        if name not in self.files:
            return None, {}
        return self.files[name], {"X-Repo-Commit": self.SHA, "ETag": f'"{self.oids[name]}"'}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_hub(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny import tiny_builtin

    hub = FakeHub(tiny_builtin(tmp_path / "served"))
    yield hub
    hub.close()


def infill_with(model: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    source = Path(__file__).parent.parent / "examples" / "stack.py"
    cmd = [sys.executable, "-m", "dlmcode", "infill", str(source), "--span", "10:11", "-m", model, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def hub_env(hub: FakeHub, cache: Path, offline: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return env | {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache)} | ({"HF_HUB_OFFLINE": "1"} if offline else {})


def test_an_uncached_hub_id_is_downloaded_with_progress_unless_offline(fake_hub, tmp_path):
    cache = tmp_path / "cache"
    refused = infill_with(fake_hub.REPO, hub_env(fake_hub, cache, offline=True))
    assert refused.returncode == 1 and fake_hub.requests == []
    assert refused.stderr.splitlines() == [
        f"dlmcode: error: model {fake_hub.REPO!r} is not a local folder and is not in the Hugging Face cache, and "
        "downloads are off"
        f" (HF_HUB_OFFLINE=1); download it with `hf download {fake_hub.REPO}` or go online"
    ]
    flag = infill_with(fake_hub.REPO, hub_env(fake_hub, cache, offline=False), "--offline")
    assert flag.returncode == 1 and "(--offline)" in flag.stderr and fake_hub.requests == []

    local = infill_with(str(tmp_path / "served"), hub_env(fake_hub, cache, offline=True), "-q")
    fetched = infill_with(fake_hub.REPO, hub_env(fake_hub, cache, offline=False), "-q")
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout == local.stdout  # the same weights, now from the cache folder
    assert "Fetching 3 files" in fetched.stderr and "100%" in fetched.stderr  # huggingface_hub's progress bar
    got = {path.rsplit("/", 1)[1] for method, path in fake_hub.requests if method == "GET" and "/resolve/" in path}
    assert got == {"config.json", "model.safetensors", "tokenizer.json"}
    snapshot = cache / f"models--{fake_hub.REPO.replace('/', '--')}" / "snapshots" / FakeHub.SHA
    assert (snapshot / "model.safetensors").read_bytes() == fake_hub.files["model.safetensors"]

    fake_hub.requests.clear()
    again = infill_with(fake_hub.REPO, hub_env(fake_hub, cache, offline=True), "-q")
    assert again.returncode == 0 and again.stdout == local.stdout and fake_hub.requests == []  # cached: no network
    shipped = infill_with("builtin", hub_env(fake_hub, cache, offline=False), "-q")
    assert shipped.returncode == 0 and fake_hub.requests == []  # the built-in model's name is never a hub id


def test_a_failed_download_is_one_line(fake_hub, tmp_path):
    missing = infill_with("dlmcode-tests/absent", hub_env(fake_hub, tmp_path / "cache", offline=False))
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1
    assert missing.stderr.startswith(
        "dlmcode: error: model 'dlmcode-tests/absent' is not a local folder or in the Hugging Face cache, and "
        "downloading it failed ("
    )


def test_loading_leaves_the_process_environment_and_transformers_verbosity_alone(bert_dir, monkeypatch):
    from transformers.utils import logging

    monkeypatch.delenv("HF_HUB_OFFLINE")
    logging.set_verbosity_info()
    try:
        models.load(str(bert_dir), device="cpu")
        assert "HF_HUB_OFFLINE" not in os.environ
        assert logging.get_verbosity() == logging.INFO and logging.is_progress_bar_enabled()
    finally:
        logging.set_verbosity_warning()


def test_hub_cache_snapshot_is_labelled_by_its_repo_id(tmp_path):
    snap = tmp_path / "hub" / "models--Dream-org--Dream-v0-Base-7B" / "snapshots" / "abc123"
    assert hf.label(snap) == "Dream-org/Dream-v0-Base-7B"
    assert hf.label(tmp_path) == str(tmp_path)


def test_unknown_family_lists_the_families():
    with pytest.raises(
        UsageError, match="--family 'gpt': unknown model family; use one of " + ", ".join(models.FAMILIES)
    ):
        models.load("whatever", family="gpt")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda():
    with pytest.raises(ModelError, match="--device cuda: no CUDA device is available"):
        models.load("whatever", device="cuda")


def test_unknown_device_and_dtype_are_usage_errors():
    with pytest.raises(UsageError, match="--device 'tpu'"):
        models.load("whatever", device="tpu")
    with pytest.raises(UsageError, match="--dtype 'fp8'.*float32, fp32, bfloat16, bf16, float16, fp16"):
        models.load("whatever", device="cpu", dtype="fp8")


def test_device_and_dtype_names():
    from dlmcode.models.device import resolve_device, resolve_dtype

    cpu = torch.device("cpu")
    assert resolve_device("CPU") == cpu
    assert resolve_device("auto").type in ("cuda", "mps", "cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bf16", cpu) == resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_dtype("fp16", cpu) == torch.float16 and resolve_dtype("float32", cpu) == torch.float32


def test_bf16_on_cpu(bert_dir):
    dlm = models.load(str(bert_dir), device="cpu", dtype="bf16")
    assert dlm.dtype == torch.bfloat16
    assert dlm.predict(torch.tensor(dlm.tokenizer.encode(CODE[0]))).dtype == torch.float32


@pytest.mark.gpu
def test_cuda_auto_is_bf16_and_matches_cpu(bert_dir):
    cpu, gpu = models.load(str(bert_dir), device="cpu"), models.load(str(bert_dir))
    assert gpu.device.type == "cuda" and gpu.dtype in (torch.bfloat16, torch.float16)
    ids = torch.tensor(cpu.tokenizer.encode(CODE[0]))
    logits = gpu.predict(ids)
    assert logits.device.type == "cuda" and logits.dtype == torch.float32
    torch.testing.assert_close(logits.cpu(), cpu.predict(ids), atol=0.1, rtol=0.05)


# builtin


@pytest.mark.shipped
def test_load_without_a_name_is_the_builtin_model():
    dlm = models.load(device="cpu")
    assert (dlm.family, dlm.name) == ("builtin", "builtin")
    assert models.load("builtin", device="cpu").family == "builtin"
    ids = torch.tensor(dlm.tokenizer.encode(CODE[0])[: dlm.context])
    assert dlm.predict(ids).shape[0] == len(ids)


# import cost


def test_importing_models_does_not_import_transformers():
    code = (
        "import sys, dlmcode.models; assert 'transformers' not in sys.modules and 'huggingface_hub' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_masked_lm_weights_are_not_mistaken_for_a_remote_family(bert_dir):
    config = json.loads((bert_dir / "config.json").read_text())
    assert not any(models.FAMILIES[k].matches(config) for k in ("builtin", "llada", "dream"))


def test_a_hub_family_config_with_a_wrong_type_is_one_line(tmp_path, bert_dir):
    import shutil

    broken = tmp_path / "bert"
    shutil.copytree(bert_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(config | {"hidden_size": "big"}))
    with pytest.raises(ModelError) as err:
        models.load(str(broken), device="cpu")
    assert str(err.value).startswith(f"model {str(broken)!r}") and "\n" not in str(err.value), str(err.value)
    assert "hidden_size" in str(err.value)
