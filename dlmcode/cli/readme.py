"""The README's decoder table, generated from the registry (a test keeps README in step)."""

from __future__ import annotations

from .. import decoders


def decoder_table() -> str:
    """Markdown table: decoder, what it does, its own settings with defaults."""
    rows = ["| decoder | what it does | settings (default) |", "|---|---|---|"]
    shared = {"temperature", "block"}
    for name in decoders.DECODERS:
        entry = decoders.describe(name)
        own = ", ".join(f"`{s['name']}` ({s['default']})" for s in entry["settings"] if s["name"] not in shared)
        rows.append(f"| `{name}` | {entry['description']} | {own or '—'} |")
    return "\n".join(rows) + "\n"
