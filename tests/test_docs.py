# SPDX-License-Identifier: Apache-2.0
"""The documentation is kept in step with the code it describes.

- Every command click registers has a page in docs/commands/ (and no page
  names a command that is gone), and every option of every command is
  documented on its page, no more and no fewer; every page builds into a
  man page (docs/build_man.py).
- Every file path cited in the docs, code comments and tests exists, every
  Markdown link resolves (anchors included), and every docs/spec.md
  section cited (§N.N, "section N.N") is a heading of the spec.
- The README stays short, keeps the set-up commands .ci/run relies on, and
  docs/kernels.md keeps the markers vagrant/vm/kernel_table.py rewrites
  the kernel table between.
"""

import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
COMMANDS = DOCS / "commands"
SPEC = DOCS / "spec.md"

# Cited paths that are not in this repository, each with where it is.
EXTERNAL = {
    "kernel/sched/membarrier.c": "the Linux source tree",
    "kernel/bpf/ringbuf.c": "the Linux source tree",
    "xdp/zl_not_a_header.h": "a header that must not exist (tests/test_bench_c_consumer.py)",
}
SKIP_DIRS = {".git", "build", "dist", "__pycache__", "node_modules"}
TEXT_SUFFIXES = {".py", ".c", ".h", ".sh", ".md", ".toml", ".cfg", ".yaml", ".yml", ".in"}
TEXT_NAMES = {"run", "zl-init", "Vagrantfile", "Makefile"}


def _build_man():
    spec = importlib.util.spec_from_file_location("build_man", DOCS / "build_man.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _commands() -> dict[str, click.Context]:
    """Page name -> a context of its command (inheriting the group's settings,
    -h among them), for the group and every command under it."""
    from pyxdp import cli

    cli._register()
    found: dict[str, click.Context] = {}

    def walk(ctx: click.Context, path: list[str]) -> None:
        found["-".join(["zerolayer", *path])] = ctx
        if isinstance(ctx.command, click.Group):
            for name, sub in ctx.command.commands.items():
                walk(click.Context(sub, parent=ctx, info_name=name, **sub.context_settings),
                     [*path, name])

    walk(click.Context(cli.cli, info_name="zerolayer", **cli.cli.context_settings), [])
    return found


def _section(text: str, heading: str) -> list[str]:
    lines = text.split("\n")
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def _documented_options(page: str) -> set[str]:
    """The flags an OPTIONS section documents: `--port N`, `-i, --interface IFACE`."""
    flags = set()
    for line in _section(page, "OPTIONS"):
        item = re.match(r"- `([^`]+)`: ", line)
        if item:
            for part in item.group(1).split(", "):
                flags.add(part.split()[0])
    return flags


def test_every_command_has_a_page_and_every_page_a_command():
    pages = {path.stem for path in COMMANDS.glob("*.md")}
    assert pages == set(_commands())


@pytest.mark.parametrize("name", sorted(path.stem for path in COMMANDS.glob("*.md")))
def test_every_option_is_documented_on_its_page(name):
    ctx = _commands()[name]
    page = (COMMANDS / f"{name}.md").read_text()
    flags, options, arguments = set(), [], []
    for param in ctx.command.get_params(ctx):
        if isinstance(param, click.Option) and not param.hidden:
            flags.update(param.opts + param.secondary_opts)
            options.append(param.opts + param.secondary_opts)
        elif isinstance(param, click.Argument):
            arguments.append(param.make_metavar(ctx).rstrip(".").strip("[]"))
    assert _documented_options(page) == flags
    synopsis = "\n".join(_section(page, "SYNOPSIS"))
    for names in options:
        if not set(names) & {"--help", "--version"}:
            assert re.search(rf"(?<![\w-])({'|'.join(names)})(?![\w-])", synopsis), \
                f"{name}: {names} not in SYNOPSIS"
    for argument in arguments:
        assert argument in synopsis, f"{name}: argument {argument} not in SYNOPSIS"


def test_every_page_builds_into_a_man_page(tmp_path):
    build_man = _build_man()
    assert build_man.main(["build_man.py", str(tmp_path)]) == 0
    built = {path.name for path in tmp_path.iterdir()}
    assert built == {f"{name}.8" for name in _commands()}
    for name in _commands():
        roff = (tmp_path / f"{name}.8").read_text()
        assert roff.startswith(f'.TH "{name.upper()}" "8"')
        assert '.SH "NAME"' in roff and '.SH "SYNOPSIS"' in roff and '.SH "OPTIONS"' in roff
        assert roff.isascii()
        page = (COMMANDS / f"{name}.md").read_text()
        assert _section(page, "NAME")[1].startswith(f"{name} - ")
        for cited in re.findall(r"\b(zerolayer(?:-[a-z]+)*)\(8\)", page):
            assert cited in _commands(), f"{name}: {cited}(8) has no page"


def test_build_man_refuses_what_it_cannot_render():
    build_man = _build_man()
    with pytest.raises(build_man.PageError):
        build_man.convert("# zerolayer-x(8)\n\n## NAME\n\nno dash here\n")
    with pytest.raises(build_man.PageError):
        build_man.convert("# Not a title\n")
    with pytest.raises(build_man.PageError):
        build_man.convert("# zerolayer-x(8)\n\n## Options\n")
    name, roff = build_man.convert(
        "# zerolayer-x(8)\n\n## NAME\n\nzerolayer-x - does x\n\n## OPTIONS\n\n"
        "- `--mode A|B`: the *mode*,\n  **always** `set`.\n\n```\n.starts with a dot\n```\n")
    assert name == "zerolayer-x.8"
    assert "\\fB\\-\\-mode A|B\\fR\nthe \\fImode\\fR, \\fBalways\\fR \\fBset\\fR." in roff
    assert "\\&.starts with a dot" in roff


# --- references ---------------------------------------------------------------


def _text_files() -> list[Path]:
    files = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")
                   and (not d.startswith(".") or d == ".ci")]
        for name in names:
            path = Path(root) / name
            if path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
                files.append(path)
    return sorted(files)


def _path_pattern() -> re.Pattern:
    tops = [p.name for p in REPO.iterdir() if p.is_dir() and p.name not in SKIP_DIRS
            and (not p.name.startswith(".") or p.name == ".ci")]
    subpackages = [p.name for p in (REPO / "pyxdp").iterdir()
                   if p.is_dir() and (p / "__init__.py").exists()]
    names = "|".join(sorted({re.escape(n) for n in tops + subpackages}, key=len, reverse=True))
    # Not inside a longer path, a URL, an absolute path or a system #include <...>.
    return re.compile(rf"(?<![\w/.~$<:-])((?:{names})/[\w.*/-]*[\w*/])")


def _resolves(cited: str, source: Path) -> bool:
    for base in (REPO, REPO / "pyxdp", source.parent):
        if any(ch in cited for ch in "*?"):
            if list(base.glob(cited)):
                return True
        elif (base / cited).exists():
            return True
    return False


def test_every_cited_path_exists():
    pattern = _path_pattern()
    missing = []
    for path in _text_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.split("\n"), 1):
            for match in pattern.finditer(line):
                cited = match.group(1).rstrip(".")
                last = cited.rstrip("/").rsplit("/", 1)[-1]
                if not (cited.endswith("/") or re.search(r"\w\.\w+$", last)):
                    continue  # a placeholder or a word pair ("C/UDP"), not a file
                if cited in EXTERNAL or _resolves(cited, path):
                    continue
                missing.append(f"{path.relative_to(REPO)}:{number}: {cited}")
    assert not missing, "paths cited that do not exist:\n" + "\n".join(missing)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(markdown: Path) -> set[str]:
    text = markdown.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_every_markdown_link_resolves():
    broken = []
    for path in _text_files():
        if path.suffix != ".md":
            continue
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
        for match in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = match.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            file, _, anchor = target.partition("#")
            where = (path.parent / file).resolve() if file else path
            if not where.exists():
                broken.append(f"{path.relative_to(REPO)}: {target}")
            elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
                broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "links that go nowhere:\n" + "\n".join(broken)


def test_every_spec_section_cited_exists():
    headings = set(re.findall(r"^#{2,4} (\d+(?:\.\d+)*)[. ]", SPEC.read_text(), re.M))
    assert {"1.7", "5.9", "7.2"} <= headings
    missing = []
    for path in _text_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.split("\n"), 1):
            cited = re.findall(r"§\s?(\d+(?:\.\d+)*)", line)
            for match in re.finditer(r"\bsection (\d+\.\d+(?:\.\d+)*)", line, re.I):
                if not re.search(r"RFC ?\d+\W*$", line[:match.start()]):  # another document's
                    cited.append(match.group(1))
            missing += [f"{path.relative_to(REPO)}:{number}: §{n}" for n in cited
                        if n not in headings]
    assert not missing, "spec sections cited that do not exist:\n" + "\n".join(missing)


# --- the README -----------------------------------------------------------------


def test_the_readme_is_short_and_keeps_its_set_up_commands():
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) < 8 * 1024
    first_block = re.search(r"^```\w*\n(.*?)^```", readme, re.M | re.S).group(1).split("\n")
    assert first_block[:2] == ["bash vagrant/provision.sh demo", "bash vagrant/provision.sh test"]


def test_kernel_table_rewrites_only_the_table(tmp_path):
    readme = (REPO / "docs/kernels.md").read_text()
    begin, end = "<!-- kernel-table:begin -->", "<!-- kernel-table:end -->"
    assert readme.count(begin) == 1 and readme.count(end) == 1
    copy = tmp_path / "kernels.md"
    copy.write_text(readme)
    report = tmp_path / "9.9.json"
    report.write_text(json.dumps({
        "kernel": "9.9.0-test", "system": "Debian test", "selection": "smoke",
        "columns": {"xdp_native": "XDP native"},
        "capabilities": {"xdp_native": {"passed": ["t"], "failed": [], "skipped": [],
                                        "seen": ["native on veth"]}}}))
    subprocess.run([sys.executable, str(REPO / "vagrant/vm/kernel_table.py"),
                    "--write", str(copy), str(report)], check=True, capture_output=True)
    after = copy.read_text()
    assert "| 9.9.0-test | Debian test | smoke | native on veth (1 test) |" in after
    assert after.split(begin)[0] == readme.split(begin)[0]
    assert after.split(end)[1] == readme.split(end)[1]


def _unit_settings(path: Path) -> dict[str, str]:
    """KEY: VALUE of each directive a systemd unit file sets (the last wins)."""
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_service_md_says_what_the_units_set():
    """Every unit directive docs/service.md names in backticks, with or
    without its value, is what the unit it speaks of sets (the exporter's
    where the paragraph names the exporter, zerolayer.service's otherwise);
    a sentence saying a unit does not set one, and the table of options
    left out, are held to their absence."""
    units = REPO / "packaging" / "systemd"
    main = _unit_settings(units / "zerolayer.service")
    exporter = _unit_settings(units / "zerolayer-exporter.service")
    text = (REPO / "docs" / "service.md").read_text()
    left_out = set(re.findall(r"^\| `([A-Z]\w+)=", text, re.M))
    known = set(main) | set(exporter) | left_out
    checked = 0
    for paragraph in re.split(r"\n\s*\n|\n(?=- )", text):
        unit = exporter if re.search(r"exporter(\.service| unit)", paragraph) else main
        table = paragraph.lstrip().startswith("|")
        for sentence in paragraph.splitlines() if table else re.split(r"(?<=[.;:])\s+",
                                                                        paragraph):
            absent = re.search(r"does not set|\bNot\b", sentence)
            found = re.findall(r"`([A-Z]\w+)(?:=([^`\s]+))?`", sentence)
            for i, (key, value) in enumerate(found):
                if key not in known:
                    continue
                checked += 1
                if table and i == 0 and sentence.startswith("| `"):  # an option left out
                    assert main.get(key) != value, sentence
                elif absent:
                    assert key not in unit, sentence
                else:
                    assert key in unit, sentence
                    assert not value or unit[key] == value, (sentence, unit[key])
    assert checked >= 30


def test_every_tls_library_row_names_programs_the_c_defines():
    """CONTRIBUTING's "Adding a TLS library": a row of the table is not
    enough, its entry and return programs are in bpf/streams.bpf.c."""
    from pyxdp.streams.tls_libraries import TLS_LIBRARIES

    source = (REPO / "bpf" / "streams.bpf.c").read_text()
    defined = set(re.findall(r"^int (\w+)\(struct zl_regs \*ctx\)", source, re.M))
    assert defined, "no uprobe program found in bpf/streams.bpf.c"
    for library in TLS_LIBRARIES:
        assert library.functions, library.name
        for f in library.functions:
            assert {f.entry, f.ret} <= defined, (library.name, f)
            assert f.convention and (library.files is None or library.files.pattern), library
    contributing = (REPO / "CONTRIBUTING.md").read_text()
    assert "## Adding a TLS library" in contributing
    assert "pyxdp/streams/tls_libraries.py" in contributing


def test_the_bench_docstring_names_every_section_in_the_registry_order():
    import pyxdp.bench
    from pyxdp.bench.registry import SECTIONS

    doc = " ".join(pyxdp.bench.__doc__.split())
    listed = doc.split("in the order they run and report: ", 1)[1]
    named = re.findall(r"(?:^|, |and )(\w+) \(", listed)
    assert named == list(SECTIONS), named


# The toolchain that builds and loads every program, and the one it replaced.
TOOLCHAIN_NOW = ("clang", "libbpf")
TOOLCHAIN_GONE = "bcc"


def test_the_kernel_sides_docs_name_only_the_toolchain_in_use():
    """The opening docstrings of bpf/, bench/ and kernel/, and every C file
    under bpf/ and beside the bench and lab sections, name no toolchain that
    no longer builds or loads anything (bcc's left, issue 44); bpf/'s names
    the one that does."""
    import ast

    packages = [REPO / "bpf" / "__init__.py", REPO / "pyxdp" / "bench" / "__init__.py",
                REPO / "pyxdp" / "kernel" / "__init__.py"]
    for path in packages:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert doc, path
        assert TOOLCHAIN_GONE not in doc.lower(), path
    bpf_doc = ast.get_docstring(ast.parse(packages[0].read_text())) or ""
    assert all(tool in bpf_doc for tool in TOOLCHAIN_NOW), bpf_doc
    sources = [*(REPO / "bpf").rglob("*.[ch]"), *REPO.joinpath("pyxdp").rglob("*.bpf.c")]
    assert len(sources) > 20
    stale = [str(p.relative_to(REPO)) for p in sources if TOOLCHAIN_GONE in p.read_text()]
    assert not stale, stale


def test_every_bpf_program_is_a_bpf_c_in_the_one_list_that_loads_them_all():
    """CONTRIBUTING's "Adding a BPF program" (issue 44): every program the
    kernel runs is a `*.bpf.c` built by the one function (it includes
    zl_object.h, its programs in sections); no other C file of the tree
    holds one; and each is named in tests/test_programs_load.py, which loads
    it on every kernel of the matrix."""
    sources = [path for top in ("bpf", "pyxdp", "tests") for path in (REPO / top).rglob("*.c")
               if "build" not in path.relative_to(REPO).parts]
    programs = [p for p in sources if p.name.endswith(".bpf.c")]
    assert {p.name for p in programs} >= {"xdp_token.bpf.c", "streams.bpf.c", "sk_relay.bpf.c",
                                           "xdp_tx.bpf.c", "xdp_pass.bpf.c", "xdp_count.bpf.c",
                                           "tracepoint_floor.bpf.c", "uprobe_hit.bpf.c"}
    for path in sources:
        text = path.read_text()
        is_program = '#include "zl_object.h"' in text or re.search(r'SEC\("', text)
        assert bool(is_program) == path.name.endswith(".bpf.c"), path
    listed = (REPO / "tests" / "test_programs_load.py").read_text()
    for path in programs:
        text = path.read_text()
        assert '#include "zl_object.h"' in text and re.search(r'SEC\("(?!license)', text), path
        if path.name in ("uprobe_hit.bpf.c", "tracepoint_floor.bpf.c"):
            continue  # the bench's floors, loaded by the streams bench's own test
        assert f'"{path.name} (' in listed, f"{path.name} is not in tests/test_programs_load.py"


def test_zerolayer_build_imports_every_module_that_ships_an_object():
    """`zerolayer build` finds what to build by importing the modules that
    name their objects (compiler.shipped()); one left out of its list would
    be compiled by the first command that loads it."""
    from pyxdp.cli.build_commands import OWNERS

    callers = set()
    for path in (REPO / "pyxdp").rglob("*.py"):
        if re.search(r"^[^#\n]*(\bcompiler\.|[=:] )shipped\(", path.read_text(), re.M):
            callers.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    assert len(callers) >= 6
    assert callers == set(OWNERS), callers ^ set(OWNERS)


def _recipe(title: str) -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _changed_by(commit: str) -> list[str] | None:
    """The files COMMIT changed, or None where this clone lacks it (a
    shallow one: CI's clone of main is whole). Marked `history`."""
    git = ["git", "-C", str(REPO)]
    if subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"],
                      capture_output=True).returncode != 0:
        shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"],
                                 capture_output=True, text=True).stdout.strip()
        assert shallow == "true", f"CONTRIBUTING cites {commit}, which is not in the history"
        return None
    out = subprocess.run([*git, "show", "--name-only", "--format=", commit],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


@pytest.mark.history
def test_the_tls_library_recipe_is_what_its_commit_did():
    """CONTRIBUTING's "Adding a TLS library" against the commit it cites as
    the last that did it: every file that commit changed is one the recipe
    names, and the row's file is among them."""
    recipe = _recipe("Adding a TLS library")
    commit = re.search(r"came in \(([0-9a-f]{7,40})\)", recipe)
    assert commit, "the recipe cites no commit"
    changed = _changed_by(commit.group(1))
    if changed is None:
        pytest.skip("a shallow clone: the cited commit is not here")
    assert "pyxdp/streams/tls_libraries.py" in changed
    flat = " ".join(recipe.split())
    unnamed = [path for path in changed if path not in flat]
    assert not unnamed, f"{commit.group(1)} changed what the recipe does not name: {unnamed}"
