"""The documentation stands alone and says only what is true of the code.

- no reference outside the repository; every relative link in the README, docs/ and the
  performance log points at a file here, and every `#section` at a heading that exists;
- every command the docs name exists: `extender SUBCOMMAND` with each flag given to it,
  `make TARGET`, `python -m MODULE` with its flags, a bare `--flag` (an extender flag),
  every `EXTENDER_*` variable, every repository path written in code."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest
from deploy_tools import ROOT

from extender.cli import build_parser
from extender.config import SETTINGS, env_name, flag_name
from perf import options as perf_options

DOCS = [ROOT / "README.md", ROOT / "perf" / "PERFORMANCE.md", ROOT / "perf" / "PROFILE.md",
        *sorted((ROOT / "docs").rglob("*.md"))]
IDS = [str(p.relative_to(ROOT)) for p in DOCS]
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Bare `--x` spans that are not flags of ours, each with the reason.
NOT_FLAGS = {"--x": "CEL's double unary minus (cel.md), not a flag"}


def _subcommands() -> dict[str, set[str]]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {opt for a in sub._actions for opt in a.option_strings}
            for name, sub in action.choices.items()}


SUBCOMMANDS = _subcommands()
ALL_FLAGS = set().union(*SUBCOMMANDS.values())


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w./-]+):", (ROOT / "Makefile").read_text(), re.M))


def _code(doc: Path) -> tuple[list[str], list[str]]:
    """The commands of a document: fenced lines (`\\` continuations joined), inline spans."""
    text = doc.read_text()
    lines = [line for block in FENCE.findall(text) for line in block.replace("\\\n", " ").splitlines()]
    return lines, SPAN.findall(FENCE.sub("", text))


def _segments(code: str) -> list[str]:
    """One shell command per segment: split at pipes, `;`, `&&`, and drop comments."""
    code = re.sub(r"(^|\s)#.*$", "", code)
    return [s.strip() for s in re.split(r"\|\||&&|[|;]", code) if s.strip()]


def _module_source(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _flags_in_source(path: Path) -> set[str]:
    text = path.read_text()
    found = set(re.findall(r"[\"'](--[a-z][a-z0-9-]*)[\"']", text))
    return found | _shared_perf_flags(text) | {"--help"}


def _shared_perf_flags(text: str) -> set[str]:
    """The shared options a benchmark declares by keyword: `options.parser(NAME, __doc__,
    nodes=5000, out=None)` / `options.add(parser, seed=1)` (perf/options.py)."""
    if "options." not in text:
        return set()
    flags = set()
    for call in ast.walk(ast.parse(text)):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "options"
                and call.func.attr in ("parser", "add")):
            flags |= {"--" + k.arg.replace("_", "-") for k in call.keywords
                      if k.arg in perf_options.SHARED}
    return flags


def _check_segment(seg: str, problems: list[str]) -> None:
    words = seg.split()
    # drop leading VAR=value assignments and a `$ ` prompt
    while words and (words[0] == "$" or re.fullmatch(r"[A-Z_]+=\S*", words[0])):
        words = words[1:]
    if not words:
        return
    head = words[0].rsplit("/", 1)[-1]
    if head == "extender" and words[0] in ("extender", ".venv/bin/extender", "$(BIN)/extender"):
        if len(words) < 2 or words[1].startswith("-"):
            return
        sub = words[1]
        if not re.fullmatch(r"[a-z][\w-]*", sub):
            return  # a quoted message (`extender "<url>" claims ...`), not a command
        if sub not in SUBCOMMANDS:
            problems.append(f"`extender {sub}`: no such subcommand")
            return
        for flag in FLAG.findall(" ".join(words[2:])):
            if flag not in SUBCOMMANDS[sub]:
                problems.append(f"`extender {sub} {flag}`: no such flag")
    elif head == "make" and len(words) > 1:
        for target in words[1:]:
            if "=" in target or target.startswith("-"):
                continue
            if target not in _make_targets():
                problems.append(f"`make {target}`: no such target")
    elif head in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        _check_module(words[2], words[3:], problems)
    elif re.fullmatch(r"perf\.\w+", words[0]):
        _check_module(words[0], words[1:], problems)


def _check_module(module: str, args: list[str], problems: list[str]) -> None:
    if module.split(".")[0] not in ("perf", "tests", "extender"):
        return  # pip, venv: not ours
    source = _module_source(module)
    if source is None:
        problems.append(f"`python -m {module}`: no such module")
        return
    known = _flags_in_source(source)
    if source.name == "__main__.py":  # `python -m perf run --full`: the package's CLI
        for path in source.parent.glob("*.py"):
            known |= _flags_in_source(path)
    for flag in FLAG.findall(" ".join(args)):
        if flag not in known:
            problems.append(f"`python -m {module} {flag}`: no such flag")


ARGS_OF = {"ARGS": None, "FUZZ_ARGS": ROOT / "tests" / "hardening" / "fuzzer.py",
           "SOAK_ARGS": ROOT / "perf" / "soak.py"}


def _check_make_args(code: str, problems: list[str]) -> None:
    """`make run ARGS="..."`, FUZZ_ARGS, SOAK_ARGS: the flags the Makefile passes on."""
    for var, quoted in re.findall(r"\b([A-Z_]*ARGS)=\"([^\"]*)\"", code):
        if var not in ARGS_OF:
            problems.append(f"{var}: the Makefile passes no such variable")
            continue
        known = SUBCOMMANDS["serve"] if ARGS_OF[var] is None else _flags_in_source(ARGS_OF[var])
        for flag in FLAG.findall(quoted):
            if flag not in known:
                problems.append(f"{var}=\"{quoted}\": {flag} is not a flag there")


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_commands_and_flags_exist(doc):
    problems: list[str] = []
    lines, spans = _code(doc)
    for code in lines + spans:
        _check_make_args(code, problems)
        for seg in _segments(re.sub(r"\b[A-Z_]+=\"[^\"]*\"", "", code)):
            _check_segment(seg, problems)
    for code in spans:
        bare = re.fullmatch(r"(--[a-z][a-z0-9-]*)(?:[ =].*)?", code.strip())
        if bare and bare.group(1) not in ALL_FLAGS and bare.group(1) not in NOT_FLAGS:
            harness = any(bare.group(1) in _flags_in_source(p)
                          for p in [*(ROOT / "perf").glob("*.py"), *(ROOT / "tests" / "hardening").glob("*.py")])
            if not harness:
                problems.append(f"`{code}`: {bare.group(1)} is no flag of extender or of the harness")
    assert not problems, f"{doc.relative_to(ROOT)}:\n" + "\n".join(sorted(set(problems)))


ENV_TWINS = {env_name(attr) for attr in SETTINGS} | {"EXTENDER_CONFIG"}
# Variables the history names after they were removed, each with the reason.
REMOVED_VARIABLES = {"EXTENDER_BENCH_GC_FREEZE": "a benchmark switch PROFILE.md says was removed"}


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_environment_variables_exist(doc):
    named = set(re.findall(r"\bEXTENDER_[A-Z][A-Z_]*[A-Z]\b", doc.read_text()))
    sources = "\n".join(p.read_text() for p in [*(ROOT / "extender").rglob("*.py"), *(ROOT / "perf").glob("*.py"),
                                                *(ROOT / "tests").rglob("*.py"), *(ROOT / ".ci").iterdir()]
                        if p.is_file())
    unknown = [v for v in named - ENV_TWINS - set(REMOVED_VARIABLES) if v not in sources]
    assert not unknown, f"{doc.relative_to(ROOT)} names variables nothing reads: {unknown}"


REPO_PATH = re.compile(r"(?:extender|manifests|tests|perf|examples|charts|docs|\.ci)/[\w./{},-]*")


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[:m.start()] + alt + path[m.end():])]


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_repository_paths_in_code_exist(doc):
    missing = []
    for span in SPAN.findall(doc.read_text()):
        if not REPO_PATH.fullmatch(span) or span.startswith(("perf/out", "build/")):
            continue
        missing += [p for p in _expand(span.rstrip(".")) if not (ROOT / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = FENCE.sub("", doc.read_text())
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_relative_links_resolve(doc):
    broken = []
    for target, anchor in LINK.findall(FENCE.sub("", doc.read_text())):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = (doc.parent / target) if target else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links {broken}"


def test_every_doc_is_in_the_indexes():
    """docs/README.md links every page of docs/; the README links docs/README.md."""
    index = (ROOT / "docs" / "README.md").read_text()
    pages = [p for p in (ROOT / "docs").rglob("*") if p.is_file() and p.name != "README.md"]
    unlisted = [str(p.relative_to(ROOT)) for p in pages
                if f"({p.relative_to(ROOT / 'docs').as_posix()})" not in index]
    assert not unlisted, f"docs/README.md does not link {unlisted}"
    readme = (ROOT / "README.md").read_text()
    assert "(docs/README.md)" in readme
    unlisted = [str(p.relative_to(ROOT)) for p in pages if f"({p.relative_to(ROOT).as_posix()})" not in readme]
    assert not unlisted, f"README.md does not link {unlisted}"


def test_the_readme_is_an_entry_point():
    """Issue 25: about 250 lines, quick start first, the root note for `make test`."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 280
    headings = re.findall(r"^## (.*)$", FENCE.sub("", text), re.M)
    assert headings[:4] == ["Quick start", "Install", "Wire it into kube-scheduler", "Why is my pod Pending?"]
    assert "needs root" in text and "sudo .ci/install-tools" in text


def test_the_spec_lives_in_docs():
    ref = ROOT / "docs" / "reference"
    for name in ("semantics.md", "cel.md", "topology-spread.md", "openapi.yaml"):
        assert (ref / name).is_file()
    text = (ref / "semantics.md").read_text()
    for section in ("### 0.1", "### 3.3", "### 4.4", "## 5.", "### 6.4", "## 7."):
        assert section in text, f"cited section {section} missing"
    assert not list((ROOT / "docs").glob("*.yaml")), "docs/openapi.yaml moved to docs/reference/"


def test_nothing_points_outside_the_repository():
    tracked = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".md", ".py", ".yaml", ".toml")
               and not any(part in (".venv", "build", ".git", "node_modules", ".ci") for part in p.parts)]
    offenders = [str(p.relative_to(ROOT)) for p in tracked
                 if re.search(r"\.\./shared|/work/shared", p.read_text(errors="replace"))
                 and p != ROOT / "tests" / "deploy" / "test_docs.py"]
    assert not offenders


def test_the_configuration_page_lists_every_setting():
    """Issue 36 item 4: configuration.md, billed as every flag, has a row for each setting
    with its flag, its environment twin and its file key."""
    rows = [line for line in (ROOT / "docs" / "operate" / "configuration.md").read_text().splitlines()
            if line.startswith("| `--")]
    missing = []
    for attr, (file_key, _) in SETTINGS.items():
        cells = [f"`{flag_name(attr)}", f"`{env_name(attr)}`", f"`{file_key}`"]
        if not any(all(cell in row for cell in cells) for row in rows):
            missing.append(flag_name(attr))
    assert missing == []


def test_the_install_docs_show_the_helm_path_first():
    """The README's Install section and docs/operate/deploy.md give `helm install` before
    any kustomize command, and both commands still build (the rendering tests run them)."""
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("\n## Install\n"):readme.index("\n## ", readme.index("\n## Install\n") + 1)]
    deploy = (ROOT / "docs" / "operate" / "deploy.md").read_text()
    for name, text in (("README.md, Install", install), ("deploy.md", deploy)):
        helm, kustomize = text.find("helm install "), text.find("kubectl apply -k")
        assert 0 <= helm < kustomize, f"{name}: helm install first"
        first_block = FENCE.search(text).group(1)
        assert first_block.startswith("helm install "), f"{name}: the first command block is the Helm install"
    assert deploy.index("## Install with Helm") < deploy.index("## Install with kustomize")
