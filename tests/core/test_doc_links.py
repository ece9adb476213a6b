"""Every relative link of the repository's Markdown (README, CONTRIBUTING, docs/, spec/,
the READMEs under tests/) leads somewhere: the file or folder exists in the checkout and
an `#anchor` names a heading of its page, as GitHub makes them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import REPO

SKIP = {".git", ".venv", "build", "node_modules", ".pytest_cache", ".mypy_cache",
        ".ruff_cache"}
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def pages() -> list[Path]:
    return sorted(p for p in REPO.rglob("*.md")
                  if not SKIP & set(p.relative_to(REPO).parts[:-1])
                  and not any(part.endswith(".egg-info") for part in p.parts))


def _prose(text: str) -> str:
    """The page without its code: links in code blocks and spans are not links."""
    return CODE.sub("", FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """The ids GitHub gives the page's headings: lower case, punctuation dropped,
    spaces to hyphens, `-1`, `-2`, ... on repeats."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", text), re.M):
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link: its text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    prose = _prose(page.read_text())
    targets = INLINE.findall(prose) + REFERENCE.findall(prose)
    broken = []
    for target in targets:
        if SCHEME.match(target):
            continue  # http(s), mailto: not this test's business
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if root.resolve() not in (dest, *dest.parents):
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    assert not broken_links(page), broken_links(page)


def test_the_pages_are_found() -> None:
    found = {str(p.relative_to(REPO)) for p in pages()}
    assert {"README.md", "CONTRIBUTING.md", "docs/configuration.md", "docs/deploy.md",
            "spec/metrics.md", "tests/fake_nvml/README.md"} <= found


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## A `code` heading: yes\n\n## Twice\n"
                                       "## Twice\n")
    (tmp_path / "page.md").write_text(
        "# Page\n\n[ok](there.md#a-code-heading-yes) [ok](there.md#twice-1) [ok](#page)\n"
        "[missing](gone.md) [bad anchor](there.md#nowhere) [web](https://example.com/x)\n"
        "`[in code](gone-too.md)`\n\n```\n[in a block](gone-three.md)\n```\n"
        "[ref]: ../../outside.md\n")
    assert broken_links(tmp_path / "page.md", tmp_path) == [
        "gone.md: no such file",
        "there.md#nowhere: no heading #nowhere in there.md",
        "../../outside.md: outside the repository",
    ]
