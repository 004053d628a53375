"""Build the corpus: pinned wheels + this interpreter's stdlib -> cleaned, deduplicated files.

Output folder:
  train.jsonl.gz  {"package", "version", "path", "text"} per training file
  eval.jsonl.gz   the same for the held-out packages (never in train; for evaluation)
  NOTICES.md      every release, version, licence, copyright lines and licence texts
  report.json     per package: files seen, kept, dropped by reason; bytes, tokens; timings
  SHA256          content checksums of train and eval (printed too)
The checksum covers (package, path, sha256 of text) in file order, so it names the content,
not the gzip bytes. The stdlib part depends on the interpreter (report.json records it).
Stream first: `build` yields progress records; `python -m dlmcode.training.corpus build` prints them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...core.errors import UsageError
from . import clean, dedup, fetch, licenses, notices

HELDOUT_PACKAGES = frozenset({"boltons", "toolz", "more-itertools", "sortedcontainers", "attrs", "cachetools"})
HELDOUT_MODULES = frozenset(
    {"boltons", "toolz", "tlz", "more_itertools", "sortedcontainers", "attr", "attrs", "cachetools"}
)
HUMANEVAL_WINDOW = 3  # consecutive distinctive lines shared with a HumanEval problem = contamination
HUMANEVAL_MIN_CHARS = 20  # "distinctive": at least this long once stripped


@dataclass
class File:
    package: str
    version: str
    path: str  # "<package>/<path inside the wheel or the stdlib>"
    text: str
    role: str  # "train" or "eval"
    reason: str | None = None  # why it was dropped (None: kept)
    scrubbed: dict[str, int] = field(default_factory=dict)


def build(
    out: Path,
    cache: Path,
    manifest: Path = fetch.MANIFEST,
    tokenizer_path: Path | None = None,
    stdlib: Path | None = None,
) -> Iterator[dict]:
    """Progress records, then {"event": "done", ...totals, "sha256": ...}. `stdlib` defaults to
    this interpreter's; `tokenizer_path` (for the token counts) to the built-in model's."""
    start, timings = time.perf_counter(), {}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    releases = checked_roles(fetch.load_manifest(manifest))
    yield {"event": "download", "releases": len(releases), "cache": str(cache)}
    wheels = fetch.download(releases, Path(cache))
    timings["download_s"] = time.perf_counter() - start
    files, sources = [], []
    for release in releases:
        found, source = read_release(release, wheels[release.name])
        files += found
        sources.append(source)
        yield {"event": "read", "package": release.name, "files": len(found)}
    stdlib_files, stdlib_source, protected_stdlib = read_stdlib(Path(stdlib or sysconfig.get_paths()["stdlib"]))
    files = stdlib_files + files
    sources.append(stdlib_source)
    timings["read_s"] = time.perf_counter() - start - sum(timings.values())
    yield {"event": "clean", "files": len(files)}
    for f in files:
        f.reason = file_reason(f)
    humaneval = humaneval_windows()
    for f in files:
        if f.reason is None and f.role == "train" and contaminated(f.text, humaneval):
            f.reason = "humaneval"
    timings["clean_s"] = time.perf_counter() - start - sum(timings.values())
    yield {"event": "dedup", "files": sum(f.reason is None for f in files)}
    deduplicate(files, protected_stdlib)
    timings["dedup_s"] = time.perf_counter() - start - sum(timings.values())
    train = [f for f in files if f.reason is None and f.role == "train"]
    evals = [f for f in files if f.reason is None and f.role == "eval"]
    sums = {"train": write_jsonl(out / "train.jsonl.gz", train), "eval": write_jsonl(out / "eval.jsonl.gz", evals)}
    used = Counter(f.package for f in train)
    sources = [replace(s, files_used=used.get(s.name, 0)) for s in sources]
    (out / "NOTICES.md").write_text(notices.render(s for s in sources if s.files_used))
    (out / "SHA256").write_text("".join(f"{v}  {k}\n" for k, v in sums.items()))
    yield {"event": "tokens"}
    report = summarise(files, sources, sums, tokenizer_path)
    timings["write_s"] = time.perf_counter() - start - sum(timings.values())
    report["timings"] = {k: round(v, 1) for k, v in timings.items()} | {
        "total_s": round(time.perf_counter() - start, 1)
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    yield {
        "event": "done",
        "out": str(out),
        **report["totals"],
        "sha256": sums,
        "seconds": report["timings"]["total_s"],
    }


def checked_roles(releases: list[fetch.Release]) -> list[fetch.Release]:
    """The held-out packages are exactly the eval releases, and none is trained on."""
    evals = {fetch.canonical(r.name) for r in releases if r.role == "eval"}
    trains = {fetch.canonical(r.name) for r in releases if r.role == "train"}
    if evals != HELDOUT_PACKAGES or evals & trains:
        raise UsageError(f"the manifest's eval releases must be exactly {', '.join(sorted(HELDOUT_PACKAGES))}")
    return releases


def read_release(release: fetch.Release, wheel: Path) -> tuple[list[File], notices.Source]:
    meta, lic, code = fetch.wheel_members(wheel)
    verdict = licenses.decide(meta, lic)  # raises LicenseRefused
    if verdict.spdx != release.license:
        raise UsageError(
            f"{release.spec}: the licence now reads as {verdict.spdx}, the manifest pins {release.license}"
        )
    files = []
    for path, data in sorted(code.items()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text, reason = "", "not-utf8"
        else:
            reason = None
        files.append(File(release.name, release.version, f"{release.name}/{path}", text, release.role, reason))
    url = f"https://pypi.org/project/{release.name}/{release.version}/"
    return files, notices.Source(release.name, release.version, verdict.spdx, url, 0, lic)


def read_stdlib(root: Path) -> tuple[list[File], notices.Source, list[str]]:
    """The stdlib training files (train.py's rules; its held-out files stay out) and the texts
    of the held-out ones, which dedup protects like the eval packages."""
    from ...bench import heldout

    license_text = (root / "LICENSE.txt").read_text()
    if licenses.text_license(license_text) != "PSF-2.0":
        raise UsageError(f"{root / 'LICENSE.txt'} does not read as the PSF licence")
    version = sys.version.split()[0]
    train_files, heldout_files = heldout.split(heldout.corpus_files(root))
    files = [File("stdlib", version, f"stdlib/{rel}", text, "train") for rel, text in sorted(train_files.items())]
    source = notices.Source("stdlib", version, "PSF-2.0", "https://www.python.org/", 0, {"LICENSE.txt": license_text})
    return files, source, [heldout_files[k] for k in sorted(heldout_files)]


def file_reason(f: File) -> str | None:
    if f.reason:
        return f.reason
    inner = f.path.split("/", 1)[1]
    if f.role == "train" and HELDOUT_MODULES & set(inner.split("/")[:-1]):
        return "eval-package-copy"
    reason = clean.verdict(inner, f.text)
    if reason:
        return reason
    text, f.scrubbed = clean.scrub(f.text)
    if text != f.text and not clean.compiles(text):
        return "scrub-broke-parse"
    f.text = text
    return None


def deduplicate(files: list[File], protected_texts: list[str]) -> None:
    """Eval files first (protected), then the stdlib, then the releases in manifest order."""
    live = [f for f in files if f.reason is None]
    ordered = [f for f in live if f.role == "eval"] + [f for f in live if f.role == "train"]
    texts = protected_texts + [f.text for f in ordered]
    protected = [True] * len(protected_texts) + [f.role == "eval" for f in ordered]
    reasons = dedup.duplicates(texts, protected)[len(protected_texts) :]
    for f, reason in zip(ordered, reasons, strict=True):
        f.reason = reason


# ---------------------------------------------------------------- HumanEval guard


def distinctive(text: str) -> list[str]:
    return [s for s in (line.strip() for line in text.splitlines()) if len(s) >= HUMANEVAL_MIN_CHARS]


def humaneval_windows() -> set[tuple[str, ...]]:
    """Runs of 3 consecutive distinctive lines of every HumanEval problem (prompt + solution)."""
    from ...bench.suites import infill_path

    data = infill_path("single")
    problems: dict[str, str] = {}
    with gzip.open(data, "rt") as f:
        for line in f:
            row = json.loads(line)
            problem = row["task_id"].split("/")[2]
            problems.setdefault(problem, row["prompt"] + row["canonical_solution"] + row["suffix"])
    windows = set()
    for text in problems.values():
        lines = distinctive(text)
        windows |= {tuple(lines[i : i + HUMANEVAL_WINDOW]) for i in range(len(lines) - HUMANEVAL_WINDOW + 1)}
    return windows


def contaminated(text: str, windows: set[tuple[str, ...]]) -> bool:
    lines = distinctive(text)
    return any(tuple(lines[i : i + HUMANEVAL_WINDOW]) in windows for i in range(len(lines) - HUMANEVAL_WINDOW + 1))


# ---------------------------------------------------------------- output


def write_jsonl(path: Path, files: list[File]) -> str:
    """Write the files atomically (gzip with mtime 0: the same content gives the same bytes);
    return the content checksum."""
    checksum = hashlib.sha256()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        for f in files:
            record = {"package": f.package, "version": f.version, "path": f.path, "text": f.text}
            gz.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
            checksum.update(f"{f.package}\t{f.path}\t{hashlib.sha256(f.text.encode()).hexdigest()}\n".encode())
    os.replace(tmp, path)
    return checksum.hexdigest()


def summarise(
    files: list[File], sources: list[notices.Source], sums: dict[str, str], tokenizer_path: Path | None
) -> dict:
    from ...models import builtin_path
    from ...models.builtin import BuiltinTokenizer

    tok = BuiltinTokenizer.from_file(Path(tokenizer_path or Path(builtin_path()) / "tokenizer.json"))
    per: dict[str, dict] = {}
    for f in files:
        row = per.setdefault(
            f.package,
            {
                "version": f.version,
                "role": f.role,
                "seen": 0,
                "kept": 0,
                "bytes": 0,
                "tokens": 0,
                "dropped": Counter(),
                "scrubbed": Counter(),
            },
        )
        row["seen"] += 1
        if f.reason:
            row["dropped"][f.reason] += 1
        else:
            row["kept"] += 1
            row["bytes"] += len(f.text.encode())
            row["scrubbed"].update(f.scrubbed)
    kept = [f for f in files if f.reason is None]
    for i in range(0, len(kept), 256):  # in chunks: an Encoding holds offsets and strings per token
        chunk = kept[i : i + 256]
        for f, enc in zip(chunk, tok.tok.encode_batch([f.text for f in chunk], add_special_tokens=False), strict=True):
            per[f.package]["tokens"] += len(enc.ids)
    licence = {s.name: s.license for s in sources}
    for name, row in per.items():
        row["license"] = licence.get(name, "")
    totals = {}
    for role in ("train", "eval"):
        rows = [r for r in per.values() if r["role"] == role]
        totals[role] = {
            "packages": sum(r["kept"] > 0 for r in rows),
            "files": sum(r["kept"] for r in rows),
            "bytes": sum(r["bytes"] for r in rows),
            "tokens": sum(r["tokens"] for r in rows),
        }
    dropped = Counter()
    for row in per.values():
        dropped.update(row["dropped"])
    return {
        "python": sys.version.split()[0],
        "platform": sys.platform,
        "sha256": sums,
        "tokenizer": "v1 built-in" if tokenizer_path is None else str(tokenizer_path),
        "totals": totals,
        "dropped": dict(dropped.most_common()),
        "packages": per,
        "heldout_packages": sorted(HELDOUT_PACKAGES),
    }
