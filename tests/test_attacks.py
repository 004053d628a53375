"""The guard's attack classes (dlmcode/bench/attacks.py): each cuts the hole it names, in the whole file."""

from __future__ import annotations

from dlmcode.bench import attacks, suites

PY = '''def f(x):
    """Say what f does.

    More of it."""
    if x:
        try:
            y = {"alpha": 1, "beta": 2, "gamma": 3, "delta": 4, "epsilon": 5, "zeta": 6, "eta": 7}
        except KeyError:
            y = r"raw\\d+"
    return x
'''
C = "#include <stdio.h>\n#if X\nint a = 1;\n#endif\nint main(void) { return 0; }\n"


def by_kind(holes):
    out = {}
    for task_id, before, after, middle, lang in holes:
        out.setdefault(task_id.split("/", 1)[0], []).append((before, after, middle, lang))
    return out


def test_each_python_class_cuts_what_it_names():
    found = by_kind(attacks.file_tasks("f.py", PY, "python"))
    assert set(found) == {"docstring", "try", "indent", "tabs", "dict", "raw"}
    assert all(b + m + a == PY for kind, holes in found.items() if kind != "tabs" for b, a, m, _ in holes)
    assert [m for _, _, m, _ in found["try"]] == ["        try:"]
    (before, after, middle, _), *_ = found["docstring"]
    assert '"""' in middle and middle.rstrip().endswith("if x:")
    assert all("\t" in b + m + a and "    if" not in b + m + a for b, a, m, _ in found["tabs"])
    for before, *_ in found["indent"]:
        line = before[before.rfind("\n") + 1 :]
        assert line and not line.strip(), "the hole starts inside the leading indentation"


def test_c_directives_and_the_suite_of_a_folder(tmp_path):
    found = by_kind(attacks.file_tasks("a.c", C, "c"))
    assert "directive" in found and all(lang == "c" for holes in found.values() for *_, lang in holes)
    (tmp_path / "a.c").write_text(C)
    (tmp_path / "broken.py").write_text("def f(:\n")  # code that does not parse is no attack's input
    tasks = suites.load(f"guard-attacks:{tmp_path}").tasks
    assert tasks and {t.lang for t in tasks} == {"c"} and all(t.prompt + t.canonical + t.suffix == C for t in tasks)
