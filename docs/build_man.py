# SPDX-License-Identifier: Apache-2.0
"""Build the man pages (section 8) from the command pages in docs/commands/.

    python3 docs/build_man.py OUTDIR      writes OUTDIR/zerolayer-attach.8, ...

Standard library only. The command pages are Markdown kept to a small
subset, so that they read well on GitHub and convert without guessing:

    # zerolayer-attach(8)           first line: the page's name and section
    ## NAME                         a section (.SH); the first is NAME, with
    zerolayer-attach - one line      "name - what it does" on one line
    ### A subsection                .SS
    A paragraph of plain lines.     paragraphs are split by blank lines
    - an item                       a bullet (.IP); "  - " nests one level
    - `--opt VALUE`: what it does   in OPTIONS: a tagged item (.TP)
      continued, indented two
    ```sh ... ```                   a literal block (.nf), no markup inside
    | a | table |                   kept as literal lines

Inline: `code` and **strong** are bold, *emphasis* is italic, and a link
[text](target) keeps its text only. Anything else is an error naming the
file and line, so a page that would render badly fails the build (and
tests/test_docs.py).
"""

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMANDS = HERE / "commands"
TITLE = re.compile(r"^# ([a-z][a-z0-9-]*)\((\d)\)$")
INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\*([^*\s][^*]*?)\*|\[([^\]]+)\]\([^)\s]+\)")


class PageError(ValueError):
    pass


def version() -> str:
    """The version, from the one place it is written (pyxdp/__init__.py)."""
    found = re.search(r'^__version__\s*=\s*"([^"]+)"',
                      (HERE.parent / "pyxdp" / "__init__.py").read_text(), re.M)
    return found.group(1) if found else ""


def escape(text: str) -> str:
    """Plain text as roff: backslashes, hyphens (so options copy as typed), and
    anything beyond ASCII as a named glyph, which any groff reads."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)


def inline(text: str) -> str:
    out, pos = [], 0
    for match in INLINE.finditer(text):
        out.append(escape(text[pos:match.start()]))
        code, strong, emph, link = match.groups()
        if code is not None:
            out.append(r"\fB" + escape(code) + r"\fR")
        elif strong is not None:
            out.append(r"\fB" + inline(strong) + r"\fR")
        elif emph is not None:
            out.append(r"\fI" + inline(emph) + r"\fR")
        else:
            out.append(inline(link))
        pos = match.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def line(text: str) -> str:
    """One output line of running text: a leading . or ' would be a request."""
    return "\\&" + text if text[:1] in (".", "'") else text


def convert(source: str, name: str = "<page>") -> tuple[str, str]:
    """Return (file name, roff text) for one command page."""
    lines = source.split("\n")
    title = TITLE.match(lines[0]) if lines else None
    if not title:
        raise PageError(f"{name}:1: the first line must be '# NAME(SECTION)'")
    page, section = title.groups()
    out = [f'.TH "{page.upper()}" "{section}" "" "zerolayer {version()}" "zerolayer manual"', ".nh", ".ad l"]
    heading = ""
    para: list[str] = []
    i = 1

    def flush() -> None:
        if para:
            out.extend(line(inline(text)) for text in para)
            para.clear()

    while i < len(lines):
        raw = lines[i]
        where = f"{name}:{i + 1}"
        if raw.startswith("```"):
            flush()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise PageError(f"{where}: a code block is not closed")
            out += [".PP", ".RS 4", ".nf"]
            out += [line(escape(text)) for text in lines[i + 1:end]]
            out += [".fi", ".RE"]
            i = end + 1
            continue
        if raw.startswith("#"):
            flush()
            while out[-1] == ".PP":  # a heading starts its own paragraph
                out.pop()
        if raw.startswith("## "):
            heading = raw[3:].strip()
            if not heading.isupper():
                raise PageError(f"{where}: section headings are upper case (## OPTIONS)")
            out.append(f'.SH "{heading}"')
        elif raw.startswith("### "):
            out.append(f'.SS "{escape(raw[4:].strip())}"')
        elif raw.startswith("#"):
            raise PageError(f"{where}: only '##' and '###' headings are allowed after the title")
        elif not raw.strip():
            flush()
            if not out[-1].startswith((".PP", ".SH", ".SS", ".TH", ".nh", ".ad")):
                out.append(".PP")
        elif raw.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                if not re.fullmatch(r"\|[\s|:-]+\|", lines[i]):
                    cells = [c.strip() for c in lines[i].strip("|").split("|")]
                    rows.append("  ".join(cells))
                i += 1
            out += [".PP", ".RS 4", ".nf"] + [line(inline(r)) for r in rows] + [".fi", ".RE"]
            continue
        elif re.match(r"( {2})?- ", raw):
            flush()
            nested = raw.startswith("  ")
            indent = "    " if nested else "  "
            item = [raw.lstrip()[2:]]
            while i + 1 < len(lines) and lines[i + 1].startswith(indent) and not lines[i + 1].lstrip().startswith("- "):
                i += 1
                item.append(lines[i].strip())
            text = " ".join(item)
            tagged = re.match(r"`([^`]+)`: (.*)", text) if heading == "OPTIONS" and not nested else None
            if nested:
                out.append(".RS 2")
            if tagged:
                out += [".TP", r"\fB" + escape(tagged.group(1)) + r"\fR", line(inline(tagged.group(2)))]
            else:
                out += [r".IP \(bu 2", line(inline(text))]
            if nested:
                out.append(".RE")
        elif raw.startswith(" "):
            raise PageError(f"{where}: an indented line outside a list item")
        else:
            if heading == "NAME" and " - " not in raw:
                raise PageError(f"{where}: NAME is 'name - what it does'")
            para.append(raw)
        i += 1
    flush()
    while out[-1] == ".PP":
        out.pop()
    return f"{page}.{section}", "\n".join(out) + "\n"


def pages() -> list[Path]:
    return sorted(COMMANDS.glob("*.md"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1].startswith("-"):
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    for path in pages():
        try:
            filename, text = convert(path.read_text(), str(path))
        except PageError as exc:
            print(f"build_man: {exc}", file=sys.stderr)
            return 1
        target = outdir / filename
        if not target.exists() or target.read_text() != text:  # unchanged pages keep their mtime
            target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
