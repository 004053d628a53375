"""The speed benchmark (issue 6): what each decoder costs on the built-in model, with and without a KV cache.

For each prompt length, decoder and cache mode it decodes one canvas (prompt tokens, then
`gen` holes in blocks of `block`) and reports the median time per model call, the
decoder's own time per call (wall time of the decode minus the time inside `predict`; on a
CPU both also in the decoding thread's CPU time, the steadier figure on a shared machine),
calls, TPF and completion tokens per second, as ratios to one-token-per-step low-confidence
without a cache at the same prompt length, run first; the decoder's time is a share of that
baseline's full forward, which is how the issue states its overhead targets. On a CPU
shared with other work, OMP_NUM_THREADS=1 times small (cached) calls more truly: idle
threads of a parallel region wait on busy cores.

A block-diffusion family (SDAR, LLaDA2, DiffusionGemma: models/blocks.py) has no prefix or
dual cache: it has its exact cache of finished blocks. Its rows are cache `none` (every call
runs everything before and in the active block again: its generate without a cache, the
baseline) and `exact` (the cache), side by side, and each row counts its FLOPs from the
forwards it made; `x FLOPs` is what recomputing the whole canvas at every call would cost,
as a multiple of that.

Prompt lengths past the built-in model's context (256 tokens): its attention is RoPE with
no position table, so it runs 512- and 2048-token canvases as they are. Its predictions
there are outside what it was trained on, so TPF and outputs at those lengths only show
the cost, not quality (our choice: the issue asks for 2048-token prompts on this model).
The prompt is real Python (dlmcode's own source files) tokenized and cut to length.

The rooms: what the grid times and the model (config), one decode timed and the stream of rows
(timed), the summary and table (report), and the issue-30 probes (probes). This face hands on
the names the CLI, tests and benchmarks use: `from dlmcode.bench import speed; speed.stream(...)`.
"""

from .config import BASELINE, EXACT, SpeedConfig, grid, load, parse_lengths
from .probes import ProbeConfig, against, probe_line, sampling_cost, wide_vocab_model
from .report import summary, table, targets
from .timed import Next, Row, Timed, canvas, guarded, measure, options_for, run, stream, warm_decoder

__all__ = [
    "BASELINE",
    "EXACT",
    "SpeedConfig",
    "grid",
    "load",
    "parse_lengths",
    "ProbeConfig",
    "against",
    "probe_line",
    "sampling_cost",
    "wide_vocab_model",
    "summary",
    "table",
    "targets",
    "Next",
    "Row",
    "Timed",
    "canvas",
    "guarded",
    "measure",
    "options_for",
    "run",
    "stream",
    "warm_decoder",
]
