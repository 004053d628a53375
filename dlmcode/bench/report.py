"""A bench's outputs in --out: samples.jsonl, summary.json, summary.csv, pareto.png and pareto.svg.

Files are replaced atomically; matplotlib (the `plot` extra) is imported only to draw.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..core import files
from ..core.errors import InputError
from .metrics import Sample

CSV_FIELDS = (
    "decoder",
    "sweep",
    "settings",
    "n",
    "errors",
    "pass_at_1",
    "exact_match",
    "syntax_valid",
    "breakage_rate",
    "trivial",
    "tpf",
    "calls",
    "reopened",
    "unguarded",
    "guard_share",
    "turned_away",
    "tokens_per_s",
    "seconds",
)
PLOT_NAME = "pareto"
PLOT_HELP = "pip install 'dlmcode[plot]'"


def read_samples(out: Path, name: str, parts: str) -> dict[tuple, Sample]:
    """Samples already written in `out` (the merged file and any rank's part file), by key."""
    found: dict[tuple, Sample] = {}
    for path in [out / name, *sorted(out.glob(parts))]:
        if path.is_file():
            for sample in _read(path):
                found[sample.key] = sample
    return found


def _read(path: Path) -> Iterator[Sample]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # a last line without its "\n" is a torn write: redone on resume
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield Sample.from_dict(json.loads(line))
        except (json.JSONDecodeError, TypeError):
            raise InputError(f"{path}:{number}: not a sample line; move the file away to start afresh") from None


def appended(samples: Iterator[Sample], path: Path) -> Iterator[Sample]:
    """Pass the samples through, appending each to `path` as one JSON line as soon as it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_torn_line(path)
    with open(path, "a", encoding="utf-8") as handle:
        for sample in samples:
            handle.write(json.dumps(sample.to_dict(), ensure_ascii=False) + "\n")
            handle.flush()
            yield sample


def _drop_torn_line(path: Path) -> None:
    """Cut a last line left without its "\n" by an interrupted write, so appends start clean."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def write_outputs(out: Path, name: str, parts: str, samples: list[Sample], summary: dict) -> list[Path]:
    """Write every output; return the paths written (no plot without matplotlib)."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / name, "".join(json.dumps(s.to_dict(), ensure_ascii=False) + "\n" for s in samples))
    for part in out.glob(parts):
        part.unlink()
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_atomic(out / "summary.csv", to_csv(summary["rows"]))
    return [out / name, out / "summary.json", out / "summary.csv", *plot(summary, out / PLOT_NAME)]


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, files.new_file_mode())  # mkstemp makes 0600; a new file gets 0666 less the umask, as the plots do
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        sweep = ";".join(f"{k}={v}" for k, v in row["sweep"].items())
        writer.writerow(row | {"sweep": sweep, "settings": json.dumps(row["settings"], sort_keys=True)})
    return buffer.getvalue()


# ---------------------------------------------------------------- the Pareto plot


def plot(summary: dict, stem: Path) -> list[Path]:
    """Quality and syntax-valid rate against TPF, one curve per decoder across its sweep.

    Returns the PNG and SVG paths, or [] when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    quality = summary["quality"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    for ax, metric in zip(axes, (quality, "syntax_valid"), strict=True):
        _panel(ax, summary["rows"], metric)
    fig.suptitle(f"{summary['suite']} · {summary['model']} · {summary['length']}", fontsize=9)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def _panel(ax, rows: list[dict], metric: str) -> None:
    points = [(r["tpf"], r[metric], curve_name(r)) for r in rows if r["tpf"] is not None and r[metric] is not None]
    colors: dict[str, str] = {}
    for name in dict.fromkeys(d for _, _, d in points):
        curve = sorted((x, y) for x, y, d in points if d == name)
        decoder = name.removesuffix(GUARDED)
        color = colors.setdefault(
            decoder, f"C{len(colors) % 10}"
        )  # a decoder's guarded and unguarded curves share a colour
        style = "-" if name.endswith(GUARDED) else ":"
        ax.plot(*zip(*curve, strict=True), marker="o", linestyle=style, color=color, label=name)
    for r in rows:  # each swept point says which value it is
        if r.get("sweep") and r["tpf"] is not None and r[metric] is not None:
            ax.annotate(
                ",".join(map(str, r["sweep"].values())),
                (r["tpf"], r[metric]),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
    front = frontier([(x, y) for x, y, _ in points])
    if len(front) > 1:
        ax.plot(*zip(*front, strict=True), linestyle="--", color="grey", linewidth=1, label="Pareto front")
    ax.set_xlabel("TPF (tokens committed per model call)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(-0.02, 1.02)  # rates
    ax.grid(alpha=0.3)
    if points:
        ax.legend(fontsize=8)


GUARDED = " guarded"


def curve_name(row: dict) -> str:
    """A row's curve: its decoder, and `guarded` when it ran under the guard (swept or set)."""
    swept = row.get("sweep", {}).get("guard")
    on = str(swept).lower() == "true" if swept is not None else bool(row.get("settings", {}).get("guard"))
    return row["decoder"] + (GUARDED if on else "")


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both TPF and quality, by TPF."""
    best, front = float("-inf"), []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return front[::-1]
