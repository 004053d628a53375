"""Fill-in-the-middle prompt templates, parsed back into prefix and suffix.

Editors that speak `/completion` (Tabby, Continue) or OpenAI without `suffix` wrap the
cursor's context in the template of an autoregressive FIM model. A masked dLLM needs none,
so the server takes prefix and suffix back out. TEMPLATES is the registry; the first whose
markers all occur in the prompt wins. Text after the middle marker (what the user already
typed of the middle, as llama.cpp's `prompt` field) belongs to the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    """A FIM template's markers; `suffix_first` when the suffix comes before the prefix (SPM, Codestral)."""

    name: str
    prefix: str
    suffix: str
    middle: str | None  # None: the prompt ends where the middle begins (Codestral)
    suffix_first: bool = False
    pad: str = ""  # a space some templates put around the code (CodeLlama: "<PRE> {prefix} <SUF>")

    def parse(self, prompt: str) -> tuple[str, str] | None:
        """(prefix, suffix) of `prompt`, or None when it does not use this template."""
        marks = [self.suffix, self.prefix] if self.suffix_first else [self.prefix, self.suffix]
        first = prompt.find(marks[0])
        second = prompt.find(marks[1], first + len(marks[0])) if first >= 0 else -1
        if second < 0:
            return None
        a = prompt[first + len(marks[0]) : second]
        end = len(prompt) if self.middle is None else prompt.find(self.middle, second + len(marks[1]))
        if end < 0:
            return None
        b = prompt[second + len(marks[1]) : end]
        typed = "" if self.middle is None else prompt[end + len(self.middle) :]
        prefix, suffix = (b, a) if self.suffix_first else (a, b)
        return self.unpad(prefix, start=True) + self.unpad(typed, start=True), self.unpad(suffix, start=False)

    def unpad(self, text: str, start: bool) -> str:
        """Drop the template's own space: CodeLlama's after <PRE> and before <SUF>/<MID>."""
        if not self.pad:
            return text
        text = text[len(self.pad) :] if start and text.startswith(self.pad) else text
        return text[: -len(self.pad)] if text.endswith(self.pad) else text


TEMPLATES = (
    Template("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, CodeGemma
    Template("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, SantaCoder
    Template(
        "qwen-spm", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", suffix_first=True
    ),  # suffix-prefix-middle order
    Template("starcoder-spm", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", suffix_first=True),
    Template("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    Template("codellama", "<PRE>", "<SUF>", "<MID>", pad=" "),  # CodeLlama, llama.cpp's default
    Template("codestral", "[PREFIX]", "[SUFFIX]", None, suffix_first=True),  # Mistral Codestral
)


def parse(prompt: str) -> tuple[str, str, str] | None:
    """(prefix, suffix, template name) from a FIM prompt; None when no known template is in it."""
    for template in TEMPLATES:
        found = template.parse(prompt)
        if found is not None:
            return found[0], found[1], template.name
    return None
