"""The README's Layout map stays true: it names every module of the package's
top level, of supervisor/ and of worker/ (the folders it lists file by file),
and names nothing that is not there. A module added, moved or renamed without
its line fails here, so the map a newcomer reads is never a guess."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jobmaster"
DETAILED = ("supervisor", "worker")  # folders the map lists module by module


def layout() -> dict[str, set[str]]:
    """Names the map gives, by folder ("" for the package's top level)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1]
    named: dict[str, set[str]] = {"": set()}
    folder = ""
    for line in block.splitlines():
        match = re.match(r"^( {6}| {8})(\S.*?)(?:\s{2,}.*)?$", line)
        if not match:
            continue
        indent, names = len(match.group(1)), match.group(2)
        if indent == 6:
            folder = names.rstrip("/") if names.endswith("/") else ""
            if not folder:
                named[""].update(re.findall(r"[\w]+\.py", names))
            else:
                named[""].add(folder + "/")
                named.setdefault(folder, set())
        else:
            named.setdefault(folder, set()).update(re.findall(r"[\w]+\.py", names))
    return named


def modules(folder: Path) -> set[str]:
    return {path.name for path in folder.glob("*.py") if path.name != "__init__.py"}


def test_the_map_names_every_top_level_module_and_folder() -> None:
    named = layout()[""]
    folders = {path.name + "/" for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert modules(PACKAGE) | folders == named


def test_the_detailed_folders_are_listed_module_by_module() -> None:
    named = layout()
    for folder in DETAILED:
        assert modules(PACKAGE / folder) == named.get(folder, set()), folder
