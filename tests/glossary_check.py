"""What a student reads on a page run by AppTest, and the glossary terms in it that the page's "Words on this
page" expander does not define (pages/common/ui.words_on_page, specviz/teaching/glossary.py).

Visible text: headings, markdown (its HTML tags and link targets dropped), captions, alerts, metric labels and
values, widget labels and the options they offer, expander and tab labels, page links, progress text, table
column names and text cells, and each chart's title, subtitle, axis titles, annotations and legend names (from
the figure's JSON). Hover text (a widget's help, a chart's hover) is left out, and so is the words expander
itself.
"""

from __future__ import annotations

import html
import json
import re

from specviz.teaching import glossary

WORDS_TITLE = "Words on this page"  # pages/common/ui.WORDS_TITLE (tests import no page module at import time)


def _markdown(s: str) -> str:
    s = re.sub(r"<(style|script)\b.*?</\1>", " ", s, flags=re.S | re.I)
    s = re.sub(r"<[^>]+>", " ", s)
    s = re.sub(r"\]\([^)]*\)", "]", s)  # a link's target is not read
    return html.unescape(s)


def _figure(spec: dict) -> list[str]:
    out, lay = [], spec.get("layout", {})

    def title(v) -> str:
        return v.get("text", "") if isinstance(v, dict) else str(v or "")

    out.append(title(lay.get("title")))
    if isinstance(lay.get("title"), dict):
        out.append(title(lay["title"].get("subtitle")))
    for key, axis in lay.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            out.append(title(axis.get("title")))
    out += [a.get("text", "") for a in lay.get("annotations", [])]
    out += [str(t.get("name", "")) for t in spec.get("data", []) if t.get("showlegend", True) is not False]
    return [_markdown(s) for s in out if s]


def _table(df) -> list[str]:
    out = [str(c) for c in df.columns]
    for c in df.columns:
        if df[c].dtype == object:
            out += [v for v in df[c].tolist() if isinstance(v, str)]
    return out


def _element(el) -> list[str]:
    kind = type(el).__name__
    if kind in ("Markdown", "Caption", "Latex", "Title", "Header", "Subheader", "Info", "Warning", "Error",
                "Success"):
        return [_markdown(str(el.value))]
    if kind == "Metric":
        return [_markdown(el.label), _markdown(str(el.value))]
    if kind == "Dataframe":
        return _table(el.value)
    if kind == "UnknownElement":
        t = el.type
        if t == "plotly_chart":
            return _figure(json.loads(el.proto.spec))
        if t == "page_link":
            return [el.proto.label]
        if t == "progress":
            return [el.proto.text]
        return []
    out = [_markdown(str(el.label))] if isinstance(getattr(el, "label", None), str) else []
    out += [str(o) for o in getattr(el, "options", None) or []]
    return out


def _walk(node, out: list[str]) -> None:
    if hasattr(node, "children"):  # a block: the words expander is left out, any other's label is read
        label = getattr(node, "label", None)
        if label == WORDS_TITLE:
            return
        if isinstance(label, str):
            out.append(label)
        for child in node.children.values():
            _walk(child, out)
    else:
        out += _element(node)


def visible_text(at) -> str:
    out: list[str] = []
    _walk(at._tree, out)
    return "\n".join(out)


def listed(at) -> set[str]:
    """The names of the terms the page's words expander(s) define."""
    found = set()
    for ex in at.expander:
        if ex.label == WORDS_TITLE:
            text = "\n".join(m.value for m in ex.markdown)
            found |= {t.name for t in glossary.TERMS if glossary.entry_md(t) in text}
    return found


def undefined(at) -> list[str]:
    """The glossary terms the page shows that its words expander does not define: [] when it defines them all."""
    have = listed(at)
    return [t.name for t in glossary.found_in(visible_text(at)) if t.name not in have]
