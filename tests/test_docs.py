"""The design docs under docs/ stay the target of the code's pointers: every `docs/<page>.md#<anchor>`
cited in gazette/ and fragments_io/ names a heading of that page, and no comment cites the unshipped
"reference N.M" sections any more."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCES = [
    p for d in ("gazette", "fragments_io") for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".proto")
]
# A pointer names its page once; further anchors of the same page follow as ", #anchor".
POINTER = re.compile(r"docs/(\w+)\.md#([a-z0-9-]+)((?:, #[a-z0-9-]+)*)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_doc_pointer_in_the_code_names_a_heading() -> None:
    anchors = {page.stem: _anchors(page) for page in DOCS.glob("*.md")}
    broken = []
    for path in SOURCES:
        for m in POINTER.finditer(path.read_text()):
            page, names = m.group(1), [m.group(2), *re.findall(r"#([a-z0-9-]+)", m.group(3))]
            broken += [
                f"{path.relative_to(ROOT)}: docs/{page}.md#{n}"
                for n in names
                if n not in anchors.get(page, ())
            ]
    assert not broken, "pointers to missing doc sections:\n" + "\n".join(broken)


def test_no_code_cites_the_unshipped_reference_sections() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in SOURCES
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b[Rr]eference [0-9]+(\.[0-9]+)?\b|\(ref\. [0-9]", line)
    ]
    assert not cited, "cite a docs/ section instead of 'reference N.M':\n" + "\n".join(cited)
