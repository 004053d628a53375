"""The pinned manifest and the downloads it names.

manifest.json (shipped in the package) lists every release the corpus is built from: name,
version, the exact wheel file, its sha256, the licence it is used under, and its role
("train", or "eval" for the held-out packages). Downloads go through `pip download --no-deps
--require-hashes` for one fixed platform (CPython 3.11, manylinux2014 x86-64), so a pure
wheel and a platform wheel resolve to the same file on any machine, and pip itself refuses a
file whose hash differs from the pin. Only the corpus build downloads; nothing at run time does.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ...core.errors import UsageError

MANIFEST = Path(__file__).with_name("manifest.json")
PIP_TARGET = [
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
]
ROLES = ("train", "eval")


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    file: str  # the wheel's file name
    sha256: str
    license: str  # SPDX id it is used under (checked again at every build)
    role: str  # "train" or "eval"

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


def load_manifest(path: Path = MANIFEST) -> list[Release]:
    data = json.loads(Path(path).read_text())
    return [Release(**entry) for entry in data["packages"]]


def save_manifest(releases: list[Release], path: Path = MANIFEST) -> None:
    data = {
        "about": "Pinned releases of the built-in model's corpus (python -m dlmcode.training.corpus); eval = held out "
        "by whole package.",
        "pip": PIP_TARGET,
        "packages": [asdict(r) for r in releases],
    }
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_download(lines: list[str], dest: Path, hashes: bool) -> None:
    """Run pip download --no-deps for requirement lines into dest; a failure is one UsageError line."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write("\n".join(lines) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-q",
        *PIP_TARGET,
        "-d",
        str(dest),
        "-r",
        req.name,
    ] + (["--require-hashes"] if hashes else [])
    done = subprocess.run(cmd, capture_output=True, text=True)
    Path(req.name).unlink()
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UsageError(f"pip download failed: {last}")


def download(releases: list[Release], cache: Path) -> dict[str, Path]:
    """Each release's wheel in `cache` (downloaded when missing), its sha256 checked: name -> path."""
    missing = [r for r in releases if not (cache / r.file).exists() or sha256_of(cache / r.file) != r.sha256]
    if missing:
        pip_download([f"{r.spec} --hash=sha256:{r.sha256}" for r in missing], cache, hashes=True)
    paths = {}
    for r in releases:
        path = cache / r.file
        if not path.exists():
            raise UsageError(f"pip did not produce {r.file} for {r.spec}: the manifest's file name is stale")
        if sha256_of(path) != r.sha256:
            raise UsageError(f"{r.file}: sha256 differs from the manifest's pin")
        paths[r.name] = path
    return paths


def pin(specs: list[str], cache: Path, role: str) -> list[Release]:
    """Download name==version specs (no hashes yet) into `cache`; their releases, licences
    checked (a refused one raises licenses.LicenseRefused naming the file)."""
    if role not in ROLES:
        raise UsageError(f"role must be one of {', '.join(ROLES)}")
    if any(spec.count("==") != 1 for spec in specs):
        raise UsageError("pin releases as name==version")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        pip_download(specs, Path(tmp), hashes=False)
        wheels = {canonical(w.name.split("-")[0]): w for w in Path(tmp).glob("*.whl")}
        pinned = []
        for spec in specs:
            name, version = spec.split("==")
            wheel = wheels[canonical(name)]
            spdx = license_of(wheel).spdx
            wheel.replace(cache / wheel.name)
            pinned.append(Release(name, version, wheel.name, sha256_of(cache / wheel.name), spdx, role))
    return pinned


def canonical(name: str) -> str:
    """PEP 503 normal form: wheel file names write "more_itertools" for "more-itertools"."""
    return name.lower().replace("_", "-").replace(".", "-")


# ---------------------------------------------------------------- reading a wheel


def wheel_members(path: Path) -> tuple[str, dict[str, str], dict[str, bytes]]:
    """(METADATA text, {licence file: text}, {path: bytes of every *.py outside *.dist-info})."""
    from . import licenses

    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        meta = next(n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        lic = {
            n: z.read(n).decode("utf-8", "replace") for n in names if ".dist-info/" in n and licenses.is_license_file(n)
        }
        code = {n: z.read(n) for n in names if n.endswith(".py") and ".dist-info/" not in n}
        return z.read(meta).decode("utf-8", "replace"), lic, code


def license_of(path: Path):
    from . import licenses

    meta, lic, _ = wheel_members(path)
    return licenses.decide(meta, lic)
