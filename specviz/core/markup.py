"""Text as the page draws it inside HTML: the one place where a file's or a model's text is escaped for HTML.

The pages draw the text of a run with st.markdown(..., unsafe_allow_html=True). Markdown reads that HTML as one
block, which ends at the first blank line, and a line ends at '\\n', '\\r' or '\\r\\n': one line ending in the
HTML would let the text after a blank line be read as markdown, where a planted image is fetched and a planted
link drawn. html_text escapes the text and draws every line break (those and every other character that
str.splitlines breaks at: U+2028, U+2029, U+0085, '\\x0b', '\\x0c', '\\x1c'-'\\x1e') as a mark and a <br>, so
the HTML it makes holds no line-ending character at all.

drawn_size(text) is how many characters of HTML the text draws as: a line break draws as BREAK (34 characters),
'<' as '&lt;'. The check of a loaded file's size (data.runfile) counts this, not the characters of the text.
"""

from __future__ import annotations

import html
import re

# every character str.splitlines breaks a line at ('\r\n' as one break)
LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
BREAK = '<span class="sv-nl">⏎</span><br>'  # a line break as drawn: a faint mark, then a new line


def html_text(text: str, line_break: str = BREAK) -> str:
    """text escaped for the body of an HTML element, each line break drawn as line_break (no line ending left)."""
    return line_break.join(html.escape(line, quote=False) for line in LINE_BREAK.split(text))


def html_attr(text: str) -> str:
    """text escaped for a quoted HTML attribute (a hover title), each line break a space."""
    return html.escape(LINE_BREAK.sub(" ", text), quote=True)


def drawn_size(text: str) -> int:
    """How many characters of HTML text draws as (html_text)."""
    return len(html_text(text))
