"""The README and the pages of docs/ link to files that exist, and to headings that exist in
Markdown files; the README links to every page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # [text](target); a title after the target is not used here
FENCE = re.compile(r"^```.*?^```", re.M | re.S)  # code blocks: their brackets are code, not links


def relative_links(path: Path) -> list[str]:
    """The targets of the inline links of a Markdown file, outside code blocks, that name a file of
    this repository (no scheme such as https: or mailto:, no bare #anchor), without their #anchor."""
    return [target.split("#", 1)[0] for target in relative_targets(path)]


def relative_targets(path: Path) -> list[str]:
    """The same targets, with their #anchor where they have one."""
    text = FENCE.sub("", path.read_text())
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    headings = re.findall(r"^#+ (.*)$", FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_there_are_pages():
    assert len(PAGES) >= 10


def test_every_relative_link_names_an_existing_file():
    dead = [f"{path.relative_to(ROOT)}: {target}" for path in [README, *PAGES]
            for target in relative_links(path) if not (path.parent / target).exists()]
    assert not dead, dead


def test_every_anchor_names_a_heading():
    dead = []
    for path in [README, *PAGES]:
        for target in relative_targets(path):
            name, _, anchor = target.partition("#")
            if anchor and name.endswith(".md") and anchor not in anchors(path.parent / name):
                dead.append(f"{path.relative_to(ROOT)}: {target}")
    assert not dead, dead


def test_the_readme_links_to_every_page():
    linked = {(README.parent / target).resolve() for target in relative_links(README)}
    missing = [page.name for page in PAGES if page.resolve() not in linked]
    assert not missing, f"README.md links to no {missing}"


def test_a_dead_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[here](here.md) [there](https://example.com/x.md) [top](#top) [a](a.md#b)\n"
                    "```bash\n[not](a-link.md)\n```\n")
    assert relative_links(page) == ["here.md", "a.md"]
    (tmp_path / "a.md").write_text("# A title: with, punctuation\n## b\n")
    assert anchors(tmp_path / "a.md") == {"a-title-with-punctuation", "b"}
