"""DiffusionGemma: loaded from a folder, its logits those of transformers' own model, and its default
decoder (renoise) giving exactly the tokens of transformers' own `generate` at a fixed seed.

The reference is transformers' DiffusionGemmaForBlockDiffusion (installed, >= 5.24) on a tiny
random model of the published shape (sliding and full attention layers, a dense MLP beside
routed experts, self-conditioning), saved here with a character tokenizer.
"""

from __future__ import annotations

import pytest
import torch

from dlmcode import models
from dlmcode.core.run import RunSettings
from dlmcode.decoders import DECODERS
from dlmcode.jobs import fill
from dlmcode.models.blocks import BlockPredict

CANVAS = 8  # the tiny model's canvas_length: its block
VOCAB = 128
PROMPT = "def add(a, b):\n"
SPECIALS = {"<pad>": 0, "<eos>": 1, "<bos>": 2}


def char_tokenizer():
    """One token a printable character, the specials first, padded to VOCAB ids."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import decoders as td
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    vocab = dict(SPECIALS)
    for c in [chr(i) for i in range(32, 127)] + ["\n"]:
        vocab[c] = len(vocab)
    while len(vocab) < VOCAB:
        vocab[f"<x{len(vocab)}>"] = len(vocab)
    tok = Tokenizer(tm.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = td.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")


def tiny_config():
    from transformers import DiffusionGemmaConfig

    text = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "global_head_dim": 32,
        "num_experts": 4,
        "top_k_experts": 2,
        "moe_intermediate_size": 32,
        "sliding_window": 12,  # shorter than a decode: the sliding layer's cache drops its oldest keys
        "layer_types": ["sliding_attention", "full_attention"],
        **{f"{k}_token_id": v for k, v in (("pad", 0), ("eos", 1), ("bos", 2))},
    }
    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    return DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=CANVAS)


@pytest.fixture(scope="module")
def reference():
    from transformers import DiffusionGemmaForBlockDiffusion

    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion(tiny_config()).eval()


@pytest.fixture(scope="module")
def folder(reference, tmp_path_factory):
    path = tmp_path_factory.mktemp("diffusion-gemma")
    reference.save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dlm(folder):
    return models.load(str(folder), device="cpu", dtype="float32")


def prompt_ids(dlm) -> list[int]:
    return dlm.tokenizer.encode(PROMPT)


def test_the_folder_loads_as_diffusion_gemma_with_its_own_sampler(dlm):
    assert dlm.family == "diffusion-gemma"
    assert dlm.blocks is not None and dlm.blocks.size == CANVAS and dlm.blocks.noise == VOCAB
    assert not dlm.blocks.aligned  # its blocks start at the first hole, after the prompt
    assert dlm.mask_id >= VOCAB  # no mask token: a hole is marked outside the vocabulary, shown as noise
    assert dlm.eos_id == 1 and dlm.decoder == "renoise"
    assert dlm.decoder_options == {"steps": 48, "bound": 0.1, "stability": 1, "confidence": 0.005}


def test_logits_are_transformers_own(dlm, reference):
    """Block by block through the exact cache, the logits transformers' model gives the same canvas in one call,
    tempered by the schedule's first step (0.4 + 0.4 * 48/48 in float32)."""
    prompt = torch.tensor(prompt_ids(dlm))
    block = torch.randint(3, VOCAB, (CANVAS,), generator=torch.Generator().manual_seed(1))
    tokens = torch.cat([prompt, block])
    predict = BlockPredict(dlm.blocks, torch.cat([prompt, torch.full((CANVAS,), dlm.mask_id)]), dlm.mask_id)
    ours = predict(tokens)[len(prompt) :]  # (CANVAS, V)
    with torch.no_grad():
        theirs = reference(input_ids=prompt[None], decoder_input_ids=block[None]).logits[0]  # (CANVAS, V)
    first = 0.4 + ((0.8 - 0.4) * (torch.tensor(48, dtype=torch.int32) / 48))
    assert torch.equal(ours, theirs / first)
    assert not bool(predict(tokens)[: len(prompt)].any()), "the prompt's rows are not scored: it is in the cache"


def test_a_later_block_sees_the_finished_one_through_the_encoder(dlm, reference):
    """Block 1 decoded, then block 2: block 1 joins the cache (the encoder, a call of its own) and block 2's
    logits are, bit for bit, those of transformers' model driven as its generate drives it: the prompt through
    the encoder, then block 1 through it in a call of its own, then the decoder on block 2 against that cache."""
    from transformers import DynamicCache

    prompt = torch.tensor(prompt_ids(dlm))
    g = torch.Generator().manual_seed(2)
    first, second = torch.randint(3, VOCAB, (CANVAS,), generator=g), torch.randint(3, VOCAB, (CANVAS,), generator=g)
    starts = (len(prompt), len(prompt) + CANVAS)
    holes = torch.full((CANVAS,), dlm.mask_id)
    predict = BlockPredict(dlm.blocks, torch.cat([prompt, holes, holes]), dlm.mask_id, torch.Generator().manual_seed(0))
    assert predict.starts == starts
    predict(torch.cat([prompt, first.index_fill(0, torch.tensor([0]), dlm.mask_id), holes]))  # a hole in block 1
    assert predict.session.length == starts[0], "block 1 is active: only the prompt is in the cache"
    ours = predict(torch.cat([prompt, first, second]))[starts[1] :]
    assert predict.session.length == starts[1], "block 1 went into the cache before block 2 ran"
    cache = DynamicCache(config=reference.config.get_text_config(decoder=True))
    with torch.no_grad():
        for ids, at in ((prompt, 0), (first, starts[0])):
            at_ids = torch.arange(at, at + len(ids))[None]
            reference.model.encoder(input_ids=ids[None], cache=cache, position_ids=at_ids)
        where = torch.arange(starts[1], starts[1] + CANVAS)[None]
        theirs = reference(decoder_input_ids=second[None], cache=cache, decoder_position_ids=where).logits[0]
    first_step = 0.4 + ((0.8 - 0.4) * (torch.tensor(48, dtype=torch.int32) / 48))
    assert torch.equal(ours, theirs / first_step)


def test_every_call_s_logits_are_those_of_transformers_generate(dlm, reference, monkeypatch):
    """A whole decode, like with like: the tempered logits of each of dlmcode's 144 calls (3 blocks of 48 steps,
    seed 0; the sliding window's oldest keys dropped by the second block) equal, bit for bit, those transformers'
    generate computes at the same call, its finished blocks in the encoder's cache as dlmcode keeps them."""
    from dlmcode.models.diffusion_gemma import GemmaSession, Schedule

    theirs, ours = [], []
    model_forward, session_run = reference.forward, GemmaSession.run

    def their_call(*args, **kwargs):
        out = model_forward(*args, **kwargs)
        theirs.append(out.logits[0].clone())
        return out

    def our_call(self, ids):
        ours.append(session_run(self, ids))
        return ours[-1]

    monkeypatch.setattr(reference, "forward", their_call)
    monkeypatch.setattr(GemmaSession, "run", our_call)
    ids = prompt_ids(dlm)
    torch.manual_seed(0)
    with torch.no_grad():
        reference.generate(torch.tensor([ids]), max_new_tokens=3 * CANVAS)
    run_generate(dlm, 0, 3 * CANVAS)
    assert len(ours) == len(theirs) == 3 * 48
    schedule = Schedule(48, 0.4, 0.8)
    for i, (mine, raw) in enumerate(zip(ours, theirs, strict=True)):
        assert torch.equal(mine, schedule.temper(raw, i % 48)), f"call {i}"


def test_loaded_weights_sit_where_the_allocator_puts_tensors(dlm, folder):
    """A safetensors file read in place leaves tensors at unaligned addresses, where MKL rounds a float32 matmul
    differently in its last bits: the loader copies each such tensor to an aligned one (hf.aligned)."""
    from transformers import DiffusionGemmaForBlockDiffusion

    from dlmcode.models import hf

    raw = DiffusionGemmaForBlockDiffusion.from_pretrained(folder, **hf.pretrained_kwargs(torch.float32, False))
    assert any(p.data_ptr() % hf.ALIGN for p in raw.parameters()), "the file read in place: some unaligned"
    model = dlm.blocks.open().model
    assert not any(t.data_ptr() % hf.ALIGN for t in [*model.parameters(), *model.buffers()])


def run_generate(dlm, seed: int, length: int, options: dict | None = None):
    run = RunSettings(decoder=None, options=options, length=length, seed=seed)
    return fill.generate_job(PROMPT, dlm, run, chat=False).run()


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_renoise_gives_the_tokens_of_transformers_generate(dlm, reference, seed):
    """Three blocks (the sliding window of 12 drops keys by the second), 48 steps each, same seed: same tokens."""
    ids = prompt_ids(dlm)
    torch.manual_seed(seed)
    with torch.no_grad():
        theirs = reference.generate(torch.tensor([ids]), max_new_tokens=3 * CANVAS).sequences[0, len(ids) :]
    result = run_generate(dlm, seed, 3 * CANVAS)
    assert result.canvas[len(ids) :] == theirs.tolist()
    assert result.calls == 3 * 48  # no block was confident enough to end early: the random model is not


def test_renoise_drawing_every_row_at_once_as_on_a_gpu_still_gives_the_tokens_of_generate(dlm, reference, monkeypatch):
    """The draw a GPU takes (multinomial_all), wired in where the CPU's is: the same tokens as its generate."""
    from dlmcode.decoders import renoise

    ids = prompt_ids(dlm)
    torch.manual_seed(1)
    with torch.no_grad():
        theirs = reference.generate(torch.tensor([ids]), max_new_tokens=CANVAS).sequences[0, len(ids) :]
    monkeypatch.setattr(renoise, "multinomial_some", renoise.multinomial_all)
    assert run_generate(dlm, 1, CANVAS).canvas[len(ids) :] == theirs.tolist()


def test_renoise_ends_a_block_early_as_its_generate_does(dlm, reference):
    """A confidence bar a random model clears (50 nats) and no stability asked: each block ends at its first
    call, as in its generate, with the same tokens (the random model's argmax is never stable over two calls)."""
    stability = 0
    ids = prompt_ids(dlm)
    torch.manual_seed(3)
    with torch.no_grad():
        out = reference.generate(
            torch.tensor([ids]), max_new_tokens=2 * CANVAS, confidence_threshold=50.0, stability_threshold=stability
        )
    result = run_generate(dlm, 3, 2 * CANVAS, {"confidence": 50.0, "stability": stability})
    assert result.canvas[len(ids) :] == out.sequences[0, len(ids) :].tolist()
    assert result.calls == round(2 * CANVAS / float(out.tokens_per_forward[0])) < 2 * 48


@pytest.mark.parametrize("name", sorted(set(DECODERS) - {"codila", "syntax-guard"}))
def test_every_decoder_runs_on_its_noise_canvas(dlm, name):
    """A masked-canvas decoder on DiffusionGemma: holes shown as noise, every hole filled, calls counted."""
    options = {"steps": 4} if name == "renoise" else None
    result = fill.generate_job(
        PROMPT, dlm, RunSettings(decoder=name, options=options, length=2 * CANVAS), chat=False
    ).run()
    tail = result.canvas[len(prompt_ids(dlm)) :]
    assert len(tail) == 2 * CANVAS and all(0 <= t < VOCAB for t in tail)
    assert result.calls >= 2


def test_renoise_stops_once_the_argmax_held_for_stability_calls():
    from dlmcode.decoders.renoise import Renoise

    decoder = Renoise(stability=2)
    history, seen = None, []
    for best in ([1, 2], [1, 2], [1, 2], [3, 2], [3, 2], [3, 2]):
        stable, history = decoder.stable(torch.tensor(best), history)
        seen.append(stable)
    assert seen == [False, False, True, False, False, True]


def test_accept_takes_the_lowest_entropies_under_the_bound():
    from dlmcode.decoders.renoise import accept

    entropy = torch.tensor([0.30, 0.01, 0.05, 0.02, 2.0])
    # sorted 0.01, 0.02, 0.05, 0.30, 2.0: sums less the largest 0, 0.01, 0.03, 0.08, 0.38
    assert accept(entropy, 0.1).tolist() == [True, True, True, True, False]
    assert accept(entropy, 0.02).tolist() == [False, True, False, True, False]
    assert accept(entropy, 1e-9).tolist() == [False, True, False, False, False]  # the surest always


def test_infill_goes_through_the_prompt_the_code_after_the_span_read_first(dlm):
    """The span's holes never see the code after them in place (it would come after them, causally): the
    suffix is cached first, then the prefix; the code around the span comes back unchanged."""
    source = "def f(x):\n    y = 1\n    return y\n"
    job = fill.infill_job(source, (2, 2), dlm, RunSettings(decoder=None, seed=0))
    result = job.run()
    after = dlm.tokenizer.decode([t for t in job.block_predict.preamble.tolist() if t not in dlm.special_ids])
    assert "return y" in after and source.endswith(after)
    assert job.block_predict.session.length >= len(job.block_predict.preamble) + len(
        dlm.tokenizer.encode("def f(x):\n")
    )
    assert result.text.startswith("def f(x):\n") and result.text.endswith("    return y\n")
    assert dlm.infill == "prompt"


def test_renoise_entropy_and_draw_are_torchs_own_bit_for_bit():
    """The decoder's entropy is Categorical(logits).entropy() and its draw torch.multinomial(probs, 1), computed
    without their argument checks: the same bits and the same generator stream (a masked column included)."""
    from dlmcode.decoders.renoise import categorical_entropy, multinomial_one

    rows = torch.randn(16, 300, generator=torch.Generator().manual_seed(5)) * 4
    rows[:, 7] = float("-inf")  # a mask token made impossible, as sampling.without leaves it
    ours = categorical_entropy(rows.clone())
    assert torch.equal(ours, torch.distributions.Categorical(logits=rows).entropy())
    probs = torch.softmax(rows, -1)
    mine, theirs = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for _ in range(3):  # the same draws, call after call: each consumes what torch.multinomial consumes
        assert torch.equal(multinomial_one(probs, mine), torch.multinomial(probs, 1, generator=theirs).squeeze(-1))
    assert torch.equal(mine.get_state(), theirs.get_state())


def test_the_draw_of_every_row_at_once_gives_the_tokens_of_the_rows_read_alone():
    """A GPU's path (every row's numbers at once, as torch.multinomial draws them) and the CPU's (the read rows'
    numbers only, the others advanced past) give the same tokens and leave the generator in the same state."""
    from dlmcode.decoders.renoise import multinomial_all, multinomial_some

    rows = torch.randn(9, 500, generator=torch.Generator().manual_seed(2)) * 3
    read = torch.tensor([False, True, True, False, False, True, False, False, True])
    probs = torch.softmax(rows[read], -1)
    alone, at_once = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(2):
        assert torch.equal(multinomial_some(probs, read, 500, alone), multinomial_all(probs, read, 500, at_once))
    assert torch.equal(alone.get_state(), at_once.get_state())
    full = torch.multinomial(torch.softmax(rows, -1), 1, generator=torch.Generator().manual_seed(4)).squeeze(-1)
    assert torch.equal(multinomial_all(probs, read, 500, torch.Generator().manual_seed(4)), full[read])


@pytest.mark.parametrize("count", [0, 1, 777, 1 << 16, (1 << 16) + 1, 3 * (1 << 16) + 5])
def test_skip_advances_the_generator_as_one_draw_does_with_a_buffer_of_its_own(count):
    """`skip` draws its numbers a chunk at a time into one reused buffer: the generator ends where drawing `count`
    64-bit numbers at once leaves it (so the next Exp(1) draws are the same), and no (count,) buffer is made."""
    from dlmcode.decoders import renoise

    ours, once = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    renoise.skip(ours, count)
    torch.empty(count, dtype=torch.int64).random_(generator=once)
    assert torch.equal(ours.get_state(), once.get_state())
    after = torch.empty(50).exponential_(1, generator=ours), torch.empty(50).exponential_(1, generator=once)
    assert torch.equal(*after)
    assert renoise.SKIPPED.buffer.numel() == renoise.SKIP_CHUNK  # bounded, whatever the count
