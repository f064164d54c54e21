"""The project's own documents (docs/*.md) served as pages, so the dashboards can link a definition
(`/docs/concepts/#borrowing`) instead of citing a document users do not have.

A deliberately small Markdown subset, enough for these files: `#`-headings (with an id made from the
text, e.g. "## Borrowing" -> id "borrowing"), fenced code blocks, `- ` lists, paragraphs, `inline code`,
**bold** and [links](url). Everything is HTML-escaped first.
"""
from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.utils.html import escape

FIRST = "concepts"  # the /docs/ index shows this one


def docs_dir() -> Path:
    return Path(settings.BASE_DIR) / "docs"


def documents() -> dict[str, str]:
    """Every docs/*.md, derived from the folder (a new file is served and linked with no code change):
    {slug: title}, the concepts document first, then by slug. The title is the file's first `# ` heading
    up to a colon ("# Federation: many clusters, one front door" -> "Federation"), else the slug. Only
    slugs the URL pattern can carry (letters, digits, -, _) are listed."""
    found = {}
    for path in sorted(docs_dir().glob("*.md")):
        if not re.fullmatch(r"[-a-zA-Z0-9_]+", path.stem):
            continue
        title = path.stem
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                title = line[2:].split(":", 1)[0].strip() or title
                break
        found[path.stem] = title
    return dict(sorted(found.items(), key=lambda item: (item[0] != FIRST, item[0])))


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _inline(text: str) -> str:
    text = escape(text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', text)
    return text


def render_markdown(source: str) -> tuple[str, list[tuple[str, str]]]:
    """Markdown (the subset above) -> (HTML, [(heading id, heading text) of the ## headings])."""
    out: list[str] = []
    toc: list[tuple[str, str]] = []
    para: list[str] = []
    in_list = in_code = False

    def flush():
        nonlocal in_list
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if in_list:
            out.append("</ul>")
            in_list = False

    for line in source.splitlines():
        if line.startswith("```"):
            if in_code:
                out.append("</code></pre>")
                in_code = False
            else:
                flush()
                out.append('<pre class="doc-code"><code>')
                in_code = True
            continue
        if in_code:
            out.append(escape(line))
            continue
        heading = re.match(r"^(#{1,4})\s+(.*)$", line)
        if heading:
            flush()
            level, text = len(heading.group(1)), heading.group(2).strip()
            anchor = slugify(text)
            if level == 2:
                toc.append((anchor, text))
            out.append(f'<h{level} id="{anchor}">{_inline(text)}</h{level}>')
        elif line.startswith("- "):
            if para:
                out.append(f"<p>{_inline(' '.join(para))}</p>")
                para.clear()
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_inline(line[2:].strip())}</li>")
        elif not line.strip():
            flush()
        elif in_list and line.startswith("  "):
            out[-1] = out[-1][:-5] + " " + _inline(line.strip()) + "</li>"
        else:
            if in_list:
                out.append("</ul>")
                in_list = False
            para.append(line.strip())
    flush()
    if in_code:
        out.append("</code></pre>")
    return "\n".join(out), toc
