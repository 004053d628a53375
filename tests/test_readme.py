"""README promises that a script can check: the decoder table, the two set-up commands."""

import re
from pathlib import Path

from dlmcode.readme import decoder_table

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


def test_main_command_example_exists():
    cmd = re.search(r"dlmcode infill (examples/\S+) --span (\d+):(\d+)", README)
    assert cmd is not None
    lines = (ROOT / cmd.group(1)).read_text().splitlines()
    assert 1 <= int(cmd.group(2)) <= int(cmd.group(3)) <= len(lines)
