"""Every relative link of README.md and docs/*.md points to a file or folder of the tree (an anchor
``#...`` is checked too, against the headings of the linked Markdown file)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as '-'."""
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return found


def relative_links(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```|<!--.*?-->", "", doc.read_text(encoding="utf-8"), flags=re.S)   # code, comments
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_documents_have_links():
    # guards the test itself: README links into docs/, and the regex sees them
    assert len(DOCUMENTS) > 5 and any("docs/" in t for t in relative_links(ROOT / "README.md"))


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(doc):
    broken = []
    for target in relative_links(doc):
        path, _, anchor = target.partition("#")
        where = (doc.parent / path).resolve() if path else doc
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading '#{anchor}' in {where.name}")
    assert not broken, f"{doc.relative_to(ROOT)} has broken links:\n  " + "\n  ".join(broken)
