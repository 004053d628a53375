"""README promises that a script can check: the decoder table, the two set-up commands."""

import re
from pathlib import Path

from dlmcode.cli.readme import decoder_table

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_decoder_table_matches_registry():
    table = re.search(r"<!-- decoders:begin[^\n]*-->\n(.*?)<!-- decoders:end -->", README, re.S)
    assert table is not None
    assert table.group(1) == decoder_table()


def test_ci_runs_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install torch==2.13.0 -e ".[test,bench,plot]"' in README
    assert 'pip install torch==2.13.0 -e ".[test,bench,plot]"' in ci
    assert "HF_HUB_OFFLINE=1 python -m pytest -q" in README
    assert "HF_HUB_OFFLINE=1 python -m pytest -q" in ci


def first_example():
    """README's first command: the example file and its span (A, B)."""
    cmd = re.search(r"dlmcode infill (examples/\S+) --span (\d+)(?::(\d+))?", README)
    assert cmd is not None
    return cmd.group(1), int(cmd.group(2)), int(cmd.group(3) or cmd.group(2))


def test_main_command_example_exists():
    path, first, last = first_example()
    lines = (ROOT / path).read_text().splitlines()
    assert 1 <= first <= last <= len(lines)


def test_first_example_shows_what_the_shipped_model_prints():
    # The first example is what a newcomer runs to see the install work: README shows its real
    # output, and on the shipped model that output parses (the old one broke in 12 of 15 decoders).
    import dlmcode

    path, first, last = first_example()
    shown = re.search(r"## First run\n.*?```\n(.*?)```", README, re.S)
    assert shown is not None
    *text, summary = shown.group(1).splitlines()
    from dlmcode.cli import view

    source = (ROOT / path).read_text()
    options = {"guard": True}  # as the command runs it: infill is guarded unless told guard=false
    result = dlmcode.infill(source, span=(first, last), dlm=dlmcode.load(), lang="python", seed=0, options=options)
    assert result.text.splitlines() == text
    assert not result.breakage.broken and summary.endswith("breakage: none")
    seconds = re.compile(r" in [0-9.]+ s ")  # the one part of the line that the machine decides
    assert seconds.sub(" in T s ", summary) == seconds.sub(" in T s ", view.summary(result))
