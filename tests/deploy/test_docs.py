"""The documentation stands alone: no reference outside the repository, and every
relative link in the README, docs/ and the performance log points at a file here."""

from __future__ import annotations

import re

import pytest
from deploy_tools import ROOT

DOCS = [ROOT / "README.md", ROOT / "perf" / "PERFORMANCE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = [target for target, _ in LINK.findall(doc.read_text())
              if "://" not in target and not (doc.parent / target).exists()]
    assert not broken, f"{doc.name}: broken links {broken}"


def test_the_spec_lives_in_docs():
    for name in ("semantics.md", "cel.md", "podtopologyspread.md"):
        assert (ROOT / "docs" / name).is_file()
    text = (ROOT / "docs" / "semantics.md").read_text()
    for section in ("### 0.1", "### 3.3", "### 4.4", "## 5.", "### 6.4", "## 7."):
        assert section in text, f"cited section {section} missing"


def test_nothing_points_outside_the_repository():
    tracked = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".md", ".py", ".yaml", ".toml")
               and not any(part in (".venv", "build", ".git", "node_modules") for part in p.parts)]
    offenders = [str(p.relative_to(ROOT)) for p in tracked
                 if re.search(r"\.\./shared|/work/shared", p.read_text(errors="replace"))
                 and p != ROOT / "tests" / "deploy" / "test_docs.py"]
    assert not offenders
