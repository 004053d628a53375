"""Licence detection for corpus packages: metadata AND the shipped licence file must agree.

A release is accepted only when (1) its metadata (License-Expression, else the License field
and the "License ::" classifiers) names only permissive licences, (2) its main licence file
is recognised, by phrases every copy of that licence contains, as one of them, (3) the two
agree, and (4) no licence file it ships contains a copyleft licence's text (a bundled GPL
component makes "which files are GPL?" a question we refuse to guess at). Anything else is
refused with the reason: the corpus is built from what passes, nothing is assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import HeaderParser

PERMISSIVE = frozenset(
    {
        "MIT",
        "MIT-0",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "0BSD",
        "Apache-2.0",
        "PSF-2.0",
        "Python-2.0",
        "ISC",
        "Zlib",
        "HPND",
    }
)
# A metadata family -> the SPDX ids a licence file may be recognised as (a "BSD License"
# classifier does not say how many clauses).
FAMILIES = {
    "MIT": {"MIT", "MIT-0"},
    "BSD": {"BSD-2-Clause", "BSD-3-Clause", "0BSD"},
    "Apache-2.0": {"Apache-2.0"},
    "PSF-2.0": {"PSF-2.0", "Python-2.0"},
    "ISC": {"ISC"},
}
# A copyleft licence's own header, or a grant under it. Not a mere mention: CPython's licence
# (which Django and pandas ship) says "previously distributed under the GNU General Public License".
COPYLEFT_TEXT = re.compile(
    r"GNU (LESSER |LIBRARY |AFFERO )?GENERAL PUBLIC LICEN[CS]E\s+Version \d"
    r"|under the terms of the GNU (Lesser |Library |Affero )?General Public Licen[cs]e"
    r"|Mozilla Public License,?\s+(Version|v\.?)\s*\d|subject to the terms of the Mozilla Public License"
    r"|Eclipse Public License\s+-?\s*v(ersion)?\s*\d|COMMON DEVELOPMENT AND DISTRIBUTION LICENSE|European Union Public "
    r"Licen[cs]e v",
    re.IGNORECASE,
)
COPYLEFT_ID = re.compile(r"\b(A?GPL|LGPL|MPL|EPL|CDDL|EUPL|GPL)\b|General Public|Mozilla", re.IGNORECASE)

# Phrases that every copy of a licence contains (whitespace-normalised, case-folded).
TEXT_MARKERS = [
    ("MIT", "permission is hereby granted, free of charge, to any person obtaining a copy"),
    ("Apache-2.0", "apache license version 2.0"),
    ("Apache-2.0", "apache license, version 2.0"),
    ("BSD", "redistribution and use in source and binary forms"),
    ("PSF-2.0", "hereby grants licensee a nonexclusive, royalty-free, world-wide license to reproduce"),
    (
        "ISC",
        "permission to use, copy, modify, and/or distribute this software for any purpose with or without fee is "
        "hereby granted",
    ),
    (
        "ISC",
        "permission to use, copy, modify, and distribute this software for any purpose with or without fee is hereby "
        "granted",
    ),
]
CLASSIFIERS = {
    "MIT License": "MIT",
    "BSD License": "BSD",
    "Apache Software License": "Apache-2.0",
    "Python Software Foundation License": "PSF-2.0",
    "ISC License (ISCL)": "ISC",
}
SHORT_NAMES = [  # the free-text License field, as short names people write
    (re.compile(r"^(the )?mit( license)?$", re.I), "MIT"),
    (re.compile(r"^(new |modified |revised )?bsd([- ]?[23][- ]clause)?( license)?$", re.I), "BSD"),
    (re.compile(r"^apache(-| )?(software )?(license)?,?( version)?( |-)?2(\.0)?( license)?$", re.I), "Apache-2.0"),
    (re.compile(r"^(psf|python software foundation)( license)?$", re.I), "PSF-2.0"),
    (re.compile(r"^isc( license)?$", re.I), "ISC"),
]


class LicenseRefused(Exception):
    """A release whose licence is copyleft, unknown or ambiguous."""


@dataclass(frozen=True)
class Verdict:
    spdx: str  # what the release is used under, e.g. "BSD-3-Clause"
    metadata: str  # what the metadata said, for NOTICES
    license_files: tuple[str, ...]  # archive paths of the licence files read


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def text_license(text: str) -> str | None:
    """SPDX id of the licence whose marker phrase comes FIRST in `text` (a package's own
    licence leads its file; bundled ones follow), or None."""
    flat = normalise(text.replace("*", " ").replace("#", " "))
    hits = [(flat.find(phrase), family) for family, phrase in TEXT_MARKERS if phrase in flat]
    if not hits:
        return None
    family = min(hits)[1]
    if family == "BSD":
        start = flat.find("redistribution and use in source and binary forms")
        clause3 = re.search(
            r"neither the name|names of (its|the) contributors|name of the copyright holder", flat[start : start + 2500]
        )
        return "BSD-3-Clause" if clause3 else "BSD-2-Clause"
    return family


def spdx_terms(expression: str) -> list[str]:
    return [t for t in re.split(r"[()\s]+|\bOR\b|\bAND\b|\bWITH\b", expression) if t]


def metadata_families(metadata: str) -> tuple[set[str], str]:
    """(families the metadata allows, a one-line description of what it said)."""
    msg = HeaderParser().parsestr(metadata)
    expression = (msg.get("License-Expression") or "").strip()
    if expression:
        terms = spdx_terms(expression)
        bad = [t for t in terms if t not in PERMISSIVE]
        if bad:
            raise LicenseRefused(f"License-Expression {expression!r} names {', '.join(bad)}")
        return {family_of(t) for t in terms}, f"License-Expression: {expression}"
    families, said = set(), []
    for classifier in msg.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            said.append(classifier)
            if COPYLEFT_ID.search(classifier):
                raise LicenseRefused(f"classifier {classifier!r}")
            name = classifier.split("::")[-1].strip()
            if name in CLASSIFIERS:
                families.add(CLASSIFIERS[name])
            elif name != "OSI Approved":
                raise LicenseRefused(f"classifier {classifier!r} is not one we accept")
    field = (msg.get("License") or "").strip()
    if field and field.upper() != "UNKNOWN":
        said.append(f"License: {field.splitlines()[0][:80]}")
        families |= field_families(field)
    if not families:
        raise LicenseRefused("the metadata names no licence")
    return families, "; ".join(said)


def family_of(spdx: str) -> str:
    return next((fam for fam, ids in FAMILIES.items() if spdx in ids), spdx)


def field_families(field: str) -> set[str]:
    """The License field: an SPDX-like short name, or a whole licence text."""
    if COPYLEFT_ID.search(field.splitlines()[0]):
        raise LicenseRefused(f"License field {field.splitlines()[0][:60]!r}")
    if len(field) > 200 or "\n" in field.strip():
        found = text_license(field)
        if found is None:
            # some releases paste their licence's title only (matplotlib: "License agreement for matplotlib ...")
            return set()
        return {family_of(found)}
    name = field.strip()
    if name in PERMISSIVE:
        return {family_of(name)}
    for pattern, family in SHORT_NAMES:
        if pattern.match(name):
            return {family}
    raise LicenseRefused(f"License field {name!r} is not a licence we recognise")


def is_license_file(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].upper()
    return base.startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE")) and not base.endswith((".PY", ".PYC"))


def main_license(files: dict[str, str]) -> str:
    """The package's own licence file: LICENSE* before COPYING*, shortest name first."""
    names = [n for n in files if not n.rsplit("/", 1)[-1].upper().startswith("NOTICE")]
    if not names:
        raise LicenseRefused("no licence file is shipped")

    def rank(n):
        return (not n.rsplit("/", 1)[-1].upper().startswith(("LICENSE", "LICENCE")), len(n), n)

    return min(names, key=rank)


def decide(metadata: str, license_files: dict[str, str]) -> Verdict:
    """Accept or refuse one release from its METADATA text and {archive path: licence text}."""
    families, said = metadata_families(metadata)
    for name, text in license_files.items():
        if COPYLEFT_TEXT.search(text):
            raise LicenseRefused(f"{name} contains a copyleft licence text ({COPYLEFT_TEXT.search(text).group(0)})")
    main = main_license(license_files)
    found = text_license(license_files[main])
    if found is None:
        raise LicenseRefused(f"{main} is not a licence text we recognise")
    if family_of(found) not in families:
        raise LicenseRefused(f"metadata says {sorted(families)} but {main} reads as {found}")
    return Verdict(found, said, tuple(sorted(license_files)))


COPYRIGHT_LINE = re.compile(r"^\W*(copyright\b|\(c\)|©)", re.IGNORECASE)
BOILERPLATE = re.compile(
    r"copyright (notice|holder|owner|license|and license)|\[yyyy\]|\{yyyy\}|<year>|copyright statement", re.I
)


def copyright_lines(text: str) -> list[str]:
    """Lines that state a copyright (not the licence's sentences about copyright notices)."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if COPYRIGHT_LINE.search(line) and not BOILERPLATE.search(line) and line not in lines:
            lines.append(line)
    return lines
