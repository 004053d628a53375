"""NOTICES.md: every release in the corpus, its version and licence, the copyright lines its
licence files state, and those files verbatim (MIT, BSD and PSF ask that the notice and the
licence text travel with copies; Apache-2.0 asks the same of NOTICE files)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .licenses import copyright_lines


@dataclass(frozen=True)
class Source:
    name: str
    version: str
    license: str
    url: str
    files_used: int
    license_files: dict[str, str]  # archive path -> text


def render(sources: Iterable[Source]) -> str:
    sources = sorted(sources, key=lambda s: s.name.lower())
    head = [
        "# Notices: the built-in model's training corpus",
        "",
        "The built-in model was trained on Python source files from the releases below (built by",
        "`python -m dlmcode.training.corpus build`). Each is used under the licence named; the copyright",
        "lines and licence texts they ship are reproduced here, as those licences ask.",
        "",
        "| package | version | licence | files used | source |",
        "|---|---|---|---|---|",
    ]
    head += [f"| {s.name} | {s.version} | {s.license} | {s.files_used} | {s.url} |" for s in sources]
    return "\n".join(head + [section for s in sources for section in _section(s)]) + "\n"


def _section(s: Source) -> list[str]:
    lines = ["", f"## {s.name} {s.version} ({s.license})", ""]
    stated = [line for text in s.license_files.values() for line in copyright_lines(text)]
    lines += [f"- {line}" for line in dict.fromkeys(stated)] or ["- (no copyright line stated in its licence files)"]
    for path, text in sorted(s.license_files.items()):
        lines += ["", f"### {path}", "", "~~~~text", text.rstrip("\n"), "~~~~"]
    return lines
