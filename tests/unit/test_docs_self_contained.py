"""The repo's docs stand on their own: nothing cites a markdown file the repo lacks, every
link into docs/ resolves (file and heading), and docs/domain.md states the figures the
catalog and the schema actually use.

A citation is any path ending in .md in a tracked file, in a comment, a docstring or a
markdown link: it must name a file inside this checkout, relative to the citing file or to
the repository root. A path that leaves the checkout (into a sibling folder, say) fails even when
the file exists on this machine: a clone elsewhere would not have it. (The fixtures below
spell their file names as `"name" + MD` so that this file cites nothing itself.)
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rackform.model.schema import HostQos, RoceIntent, SwitchQos

REPO = Path(__file__).resolve().parents[2]
DOMAIN_DOC = REPO / "docs/domain.md"
BLOCKS_DIR = REPO / "topologies" / "blocks"
SKIPPED_PREFIXES = (".venv/",)
MD = ".md"

_URL = re.compile(r"\w+://\S+")
_MARKDOWN_PATH = re.compile(r"(?<![\w.\-/])((?:\.{1,2}/)*[\w\-./]*\w\.md)(?![\w-])")
_MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class BadReference:
    path: str
    line: int
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.target}: {self.why}"


def tracked_text_files(root: Path) -> dict[str, str]:
    """Tracked file (relative path) -> its text; binary files and .venv/ left out."""
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True)
    files = {}
    for relative in filter(None, listing.stdout.split("\0")):
        if relative.startswith(SKIPPED_PREFIXES) or not (root / relative).is_file():
            continue  # a tracked file deleted in the working tree cites nothing
        try:
            files[relative] = (root / relative).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return files


def _resolves_inside(root: Path, citing: Path, target: str) -> bool:
    for base in (citing.parent, root):
        candidate = (base / target).resolve()
        if candidate.is_relative_to(root.resolve()) and candidate.is_file():
            return True
    return False


def missing_markdown_citations(root: Path, files: dict[str, str]) -> list[BadReference]:
    """Every `*.md` path cited in `files` that names no file inside `root`."""
    bad = []
    for relative, text in files.items():
        for number, line in enumerate(text.splitlines(), 1):
            for match in _MARKDOWN_PATH.finditer(_URL.sub(" ", line)):
                target = match.group(1)
                if not _resolves_inside(root, root / relative, target):
                    bad.append(BadReference(relative, number, target, "no such file in the repository"))
    return bad


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a document's headings: lower case, punctuation dropped, spaces to '-'."""
    anchors, in_code = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = None if in_code else _HEADING.match(line)
        if match:
            text = re.sub(r"[`*_]", "", match.group(1)).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def broken_doc_links(root: Path, files: dict[str, str]) -> list[BadReference]:
    """Markdown links in README.md and docs/*.md to a docs/ page that is missing, or to a
    heading that page does not have."""
    bad = []
    for relative, text in files.items():
        if not (relative == "README.md" or (relative.startswith("docs/") and relative.endswith(".md"))):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in _MARKDOWN_LINK.finditer(line):
                target = match.group(1)
                page, _, anchor = target.partition("#")
                if _URL.match(target) or not (page.endswith(".md") or (not page and anchor)):
                    continue
                linked = ((root / relative).parent / page).resolve() if page else (root / relative).resolve()
                if not linked.is_relative_to((root / "docs").resolve()) and linked != (root / "README.md").resolve():
                    continue
                if not linked.is_file():
                    bad.append(BadReference(relative, number, target, "no such page"))
                elif anchor and anchor not in heading_anchors(linked.read_text(encoding="utf-8")):
                    bad.append(BadReference(relative, number, target, f"{linked.name} has no heading #{anchor}"))
    return bad


# ---------------------------------------------------------------- the scanners themselves


def _git_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    return tmp_path


def test_scanner_finds_citations_of_missing_and_outside_files(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ("NOTES" + MD)).write_text("# exists, but outside the repository\n")
    root = _git_repo(tmp_path / "repo", {
        "docs/real" + MD: "# Real\n",
        "docs/index" + MD: f"real{MD} sits next to this page\n",
        "pkg/mod.py": f'"""See docs/real{MD}."""\n# the spec (MISSING{MD}: section 2)\n',
        "README" + MD: f"[ok](docs/real{MD}) [gone](docs/gone{MD}) ../outside/NOTES{MD} https://example.org/X{MD}\n",
    })
    found = {(bad.path, bad.line, bad.target) for bad in missing_markdown_citations(root, tracked_text_files(root))}
    assert found == {
        ("pkg/mod.py", 2, "MISSING" + MD),
        ("README" + MD, 1, "docs/gone" + MD),
        ("README" + MD, 1, "../outside/NOTES" + MD),
    }


def test_scanner_finds_links_to_missing_pages_and_headings(tmp_path: Path):
    root = _git_repo(tmp_path, {
        "docs/a" + MD: "# Page A\n\n## IPMI safety rules\n\n```\n# not a heading\n```\n",
        "docs/b" + MD: (f"[fine](a{MD}#ipmi-safety-rules) [top](a{MD}#page-a) [code](a{MD}#not-a-heading)\n"
                        f"[nope](a{MD}#ipmi-rules) [gone](c{MD}) [self](#missing)\n"),
    })
    found = {(bad.line, bad.target) for bad in broken_doc_links(root, tracked_text_files(root))}
    assert found == {(1, f"a{MD}#not-a-heading"), (2, f"a{MD}#ipmi-rules"), (2, "c" + MD), (2, "#missing")}


# ---------------------------------------------------------------- this repository


@pytest.fixture(scope="module")
def repo_files() -> dict[str, str]:
    return tracked_text_files(REPO)


def test_no_tracked_file_cites_a_markdown_file_the_repo_lacks(repo_files):
    bad = missing_markdown_citations(REPO, repo_files)
    assert not bad, "cited markdown files the repository does not have:\n" + "\n".join(map(str, bad))


def test_links_into_docs_resolve(repo_files):
    bad = broken_doc_links(REPO, repo_files)
    assert not bad, "broken links into docs/:\n" + "\n".join(map(str, bad))


# ---------------------------------------------------------------- docs/domain.md against the code


def _section(markdown: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert match, f"docs/domain.md has no section '## {heading}'"
    return match.group(1)


def _table_rows(section: str) -> dict[str, list[str]]:
    """First cell (backticks stripped) -> the row's cells, for every table row after the header."""
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 1 and not set(cells[0]) <= set("-: "):
            rows[cells[0].strip("`")] = cells
    return rows


def _ints(text: str) -> list[int]:
    return [int(number.replace(",", "")) for number in re.findall(r"\d[\d,]*", text)]


_REPO_PATH = re.compile(r"`((?:rackform|roles|templates|topologies|tests|stacks)/[\w./-]+)`")


def test_domain_names_only_paths_that_exist():
    """docs/domain.md tells where each value lives: a file that moved must be followed there."""
    named = set(_REPO_PATH.findall(DOMAIN_DOC.read_text()))
    assert named, "docs/domain.md names no repository paths: the pattern above is out of date"
    missing = sorted(path for path in named if not (REPO / path.rstrip("/")).exists())
    assert not missing, f"docs/domain.md names paths the repository does not have: {missing}"


def test_domain_building_blocks_match_the_catalog():
    rows = _table_rows(_section(DOMAIN_DOC.read_text(), "Building blocks"))
    blocks = {path.stem: yaml.safe_load(path.read_text()) for path in BLOCKS_DIR.glob("*.yaml")}
    assert set(blocks) <= set(rows), f"blocks missing from docs/domain.md: {sorted(set(blocks) - set(rows))}"
    for name, block in blocks.items():
        _, rack_units, nodes, power, ports, gpus, _source = rows[name]
        node = block.get("node") or {}
        fabric = [port for port in node.get("ports", []) if port["role"] == "fabric"]
        if block.get("switch"):
            expected_ports = (block["switch"]["ports"], block["switch"]["speed_gbps"])
        else:
            expected_ports = (sum(port["count"] for port in fabric), fabric[0]["speed_gbps"])
        documented_ports = (_ints(ports)[0], int(re.search(r"x (\d+)G", ports).group(1)))
        gpu_count = (node.get("gpus") or {}).get("count")
        assert int(rack_units) == block["rack_units"], f"{name}: rack units"
        assert int(nodes) == block["nodes"], f"{name}: nodes"
        assert _ints(power) == [block["power"]["typical_w"], block["power"]["max_w"]], f"{name}: power"
        assert documented_ports == expected_ports, f"{name}: ports (count, Gb/s)"
        assert (_ints(gpus)[:1] or [None])[0] == gpu_count, f"{name}: GPUs"


def test_domain_roce_values_match_the_schema_defaults():
    text = DOMAIN_DOC.read_text()
    roce, switch, host = RoceIntent(), SwitchQos(), HostQos()
    rows = _table_rows(_section(text, "Lossless RoCE"))
    assert _ints(rows["RoCE marking"][1]) == [roce.dscp]
    assert _ints(rows["RoCE priority"][1])[0] == roce.priority and switch.pfc_priorities == [roce.priority]
    assert _ints(rows["CNP"][1])[:2] == [roce.cnp_dscp, roce.cnp_priority]
    assert _ints(rows["host ToS"][1]) == [host.roce_tos] and host.roce_tos >> 2 == roce.dscp
    assert _ints(rows["MTU"][1]) == [switch.mtu, host.mtu]
    assert [switch.ecn.min_kb, switch.ecn.max_kb] == _ints(rows["ECN"][1])[-2:]
    assert dict(switch.dscp_to_priority) == dict(zip(_ints(rows["DSCP to priority"][1])[::2],
                                                     _ints(rows["DSCP to priority"][1])[1::2]))

    block = re.search(r"```\n(.*?)```", _section(text, "Onyx: the explicit DCB form"), re.S).group(1)
    port = "interface ethernet 1/1"
    assert block.splitlines() == [
        "dcb priority-flow-control enable force",
        *(f"dcb priority-flow-control priority {priority} enable" for priority in switch.pfc_priorities),
        f"{port} mtu {switch.mtu} force",
        f"{port} dcb priority-flow-control mode on force",
        f"{port} qos trust {'L3' if switch.trust == 'dscp' else 'L2'}",
        f"{port} traffic-class {roce.priority} congestion-control ecn minimum-absolute {switch.ecn.min_kb} "
        f"maximum-absolute {switch.ecn.max_kb}",
        f"{port} pfc-wd",
        "configuration write",
    ]
