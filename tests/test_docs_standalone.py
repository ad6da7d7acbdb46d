"""The project's files stand alone: none cites a note that is not in the repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Notes kept outside the repository, which a reader of it never has.
OUTSIDE = ("SEMANTICS.md", "DESIGN.md", "KOPF-NOTES.md", "../shared/")


def test_no_tracked_file_cites_notes_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    this = Path(__file__).resolve()
    found = []
    for name in tracked:
        path = ROOT / name
        if path.resolve() == this or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}: {note}" for note in OUTSIDE if note in text]
    assert not found, found
