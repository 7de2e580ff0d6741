"""Token-level rendering of a run: HTML for the app, ANSI for terminals.

Each token has a state, shown by colour (Okabe-Ito, colour-blind safe) AND a
second cue that survives greyscale or colour blindness:
  accepted    drafted, kept by the target          green, solid underline
  rejected    drafted, refused: shown, not kept    vermillion, strikethrough
  correction  target's replacement after a reject  blue, bold + box
  bonus       target's extra token after k accepts purple, bold + superscript +
  pending     drafted, not yet verified            orange, dashed border
  target      plain target token (no draft, k=0)   no decoration
Pure: only the standard library (and the plain records).
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Callable, Iterable, Sequence

from specviz.core import markup
from specviz.data.records import Round, Run
from specviz.data.runfile import neutral

# Okabe-Ito palette (Okabe & Ito 2008): distinguishable with all common CVDs.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

STATE_COLORS = {
    "accepted": OKABE_ITO["bluish_green"],
    "rejected": OKABE_ITO["vermillion"],
    "correction": OKABE_ITO["blue"],
    "bonus": OKABE_ITO["reddish_purple"],
    "pending": OKABE_ITO["orange"],
    "target": "#555555",
    "prompt": "#6b6b6b",
}

STATE_LABELS = {
    "accepted": "accepted (drafted, kept)",
    "rejected": "rejected (drafted, not kept)",
    "correction": "correction (target's replacement)",
    "bonus": "bonus (all k accepted: one more free)",
    "pending": "pending (drafted, not yet verified)",
    "target": "target token (no draft)",
}


def _tint(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


# Inline styles, so the HTML renders the same with or without the CSS block. A token never wraps inside
# (white-space:pre): the text breaks between tokens (text_block), so no box is cut in two.
_BASE = "border-radius:3px;padding:0 1px;margin:0 1px;white-space:pre;"
STATE_STYLES = {
    "accepted": _BASE + f"background:{_tint(STATE_COLORS['accepted'], 0.14)};"
    f"border-bottom:3px solid {STATE_COLORS['accepted']};",
    "rejected": _BASE + f"background:{_tint(STATE_COLORS['rejected'], 0.12)};"
    f"color:#8f3b00;text-decoration:line-through;text-decoration-thickness:2px;"
    f"text-decoration-color:{STATE_COLORS['rejected']};",
    "correction": _BASE + f"background:{_tint(STATE_COLORS['correction'], 0.12)};"
    f"font-weight:700;border:2px solid {STATE_COLORS['correction']};",
    "bonus": _BASE + f"background:{_tint(STATE_COLORS['bonus'], 0.18)};font-weight:700;"
    f"border-bottom:3px double {STATE_COLORS['bonus']};",
    "pending": _BASE + f"background:{_tint(STATE_COLORS['pending'], 0.10)};"
    f"border:2px dashed {STATE_COLORS['pending']};",
    "target": _BASE,
    "prompt": f"color:{STATE_COLORS['prompt']};",
}

CSS = "\n".join(
    [".sv-text{white-space:pre-wrap;line-height:2.0;font-size:17px;"
     "font-family:ui-monospace,Menlo,Consolas,monospace;}"]
    + [f".sv-{s}{{{st}}}" for s, st in STATE_STYLES.items()]
    + [".sv-nl{opacity:0.55;}", ".sv-plus{font-size:0.7em;vertical-align:super;}"]
)

_CONTAINER = ("white-space:pre-wrap;line-height:2.0;font-size:17px;color:#111;"
              "font-family:ui-monospace,Menlo,Consolas,monospace;")

_VISIBLE = {"\n": "⏎", "\r": "␍", "\t": "⇥"}


_RUN = re.compile(r"([␣⏎⇥])\1{3,}")  # four or more of one whitespace mark


def visible(s: str, spaces: bool = True, runs: bool = False) -> str:
    """Make whitespace visible for labels: ' '->'␣', '\\n'->'⏎', tab->'⇥'.

    With spaces=False only control characters are replaced. '' -> '∅'. With runs=True a run of four or more
    of one mark is written once with its count, '␣×12' (an indentation token, as a chart label or in a table).
    """
    if s == "":
        return "∅"
    out = "".join(_VISIBLE.get(ch, ch) for ch in s)
    out = out.replace(" ", "␣") if spaces else out
    return _RUN.sub(lambda m: f"{m.group(1)}×{len(m.group(0))}", out) if runs else out


# where markdown (GFM) makes a link of bare text: "http://", "https://", "www." and an e-mail's "@". Streamlit finds
# them in the text after the escapes are read, so an escaped "\\:" is linked too: a word joiner (U+2060, drawn as
# nothing) before the ':' of "://", before each '@', and before the '.' after "www", breaks every one of them.
_AUTOLINK = re.compile(r":(?=//)|@|(?<=[wW]{3})\.")
_WORD_JOINER = "\u2060"


def md_text(s: str) -> str:
    """Text to show literally inside markdown (a title, a file name, an error quoting a file): one line, plain.

    Every ASCII punctuation character is backslash-escaped (CommonMark allows it), so no link, image, emphasis,
    HTML or Streamlit directive (:red[...], :material/...:) can be planted; a bare web address or e-mail address
    is not made a link (_AUTOLINK); a bidirectional control character is shown as a mark, ⟨U+202E⟩ (neutral).
    """
    line = neutral(" ".join(str(s).splitlines()))
    line = _AUTOLINK.sub(lambda m: _WORD_JOINER + m.group(0), line)
    return "".join("\\" + ch if ch in string.punctuation else ch for ch in line)


def md_code(s: str) -> str:
    """`s` as a markdown code span that no backtick inside it can end (token texts from a file)."""
    runs = [len(r) for r in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""  # CommonMark strips one space each side
    return f"{fence}{pad}{s}{pad}{fence}"


def _tok_html(text: str, state: str, title: str = "") -> str:
    """One token as a <span>: escaped, each line break shown as '⏎' then <br>, a tab as '⇥'.

    The output never holds a line-ending character (core.markup): in st.markdown a blank line would end the
    raw-HTML block and the rest would be parsed as markdown.
    """
    body = markup.html_text(text.replace("\t", "⇥")) if text else "∅"
    if state == "bonus":
        body += '<sup class="sv-plus">+</sup>'
    t = f' title="{markup.html_attr(title)}"' if title else ""
    return (f'<span class="sv-tok sv-{state}" data-state="{state}" '
            f'style="{STATE_STYLES[state]}"{t}>{body}</span>')


def _round_tokens(r: Round) -> list[tuple[int, str, str]]:
    """(token id, state, hover title) in display order for one round."""
    out: list[tuple[int, str, str]] = []
    for j, tok in enumerate(r.emitted):
        if r.k == 0:
            state = "target"
        elif j < r.n_accepted:
            state = "accepted"
        else:
            state = r.extra_kind or "target"
        if state == "correction" and r.rejected:
            # show the refused draft just before the target's replacement
            d = r.drafted[r.n_accepted]
            out.append((d, "rejected", _hover(r, r.n_accepted, "rejected")))
        out.append((tok, state, _hover(r, j, state)))
    if r.rejected and r.extra_kind != "correction" and len(r.emitted) == r.n_accepted:
        # rejected, but the correction was cut (EOS / length): still show the refusal
        d = r.drafted[r.n_accepted]
        out.append((d, "rejected", _hover(r, r.n_accepted, "rejected")))
    return out


def _hover(r: Round, j: int, state: str) -> str:
    s = f"round {r.index + 1} · position {j + 1} · {state}"
    if state in ("accepted", "rejected") and j < len(r.p_drafted):
        s += f" · p={r.p_drafted[j]:.3f} q={r.q_drafted[j]:.3f}"
        if j < len(r.u) and r.u:
            s += f" · u={r.u[j]:.3f}"
    return s


def tokens_html(prompt_text: str, rounds: Sequence[Round], decode: Callable[[int], str],
                upto: int | None = None, pending: Round | Iterable[int] | None = None, reply: bool = False) -> str:
    """The text so far as HTML, each generated token a <span> styled by state.

    rounds: Rounds in order (a Run's .rounds); upto: show only the first `upto`
    rounds; pending: drafted ids (or a Round, whose .drafted is used) not yet
    verified, drawn with a dashed border at the end; reply: the prompt was a chat
    message (text_block).
    """
    toks = [(decode(tok), state, title) for r in list(rounds)[:upto] for tok, state, title in _round_tokens(r)]
    if pending is not None:
        ids = pending.drafted if isinstance(pending, Round) else list(pending)
        toks += [(decode(tok), "pending", f"drafted #{j + 1}, awaiting verification") for j, tok in enumerate(ids)]
    return text_block(prompt_text, toks, reply)


def text_block(prompt_text: str, toks: Iterable[tuple[str, str, str]], reply: bool = False) -> str:
    """The prompt, then each token (text, state, hover title) as a <span>, in the text's box. A line breaks
    only between tokens (<wbr>; a token is white-space:pre), so a token's box is never cut in two.

    reply: the prompt went in as a chat message, so the model's text is its reply, a turn of its own: it starts
    on a new line, not as a continuation of the prompt's last line."""
    parts = [f'<span class="sv-prompt" style="{STATE_STYLES["prompt"]}">'
             + markup.html_text(prompt_text) + "</span>"
             + ('<br class="sv-reply">' if reply and prompt_text else "")]
    parts += [_tok_html(text, state, title) for text, state, title in toks]
    return f'<div class="sv-text" style="{_CONTAINER}">{"<wbr>".join(parts)}</div>'


def legend_html(states: Sequence[str] = ("accepted", "rejected", "correction", "bonus", "pending")) -> str:
    """A one-line legend: a sample token in each state with its meaning."""
    items = [f'{_tok_html("token", s)}&nbsp;<span style="font-size:14px">{html.escape(STATE_LABELS[s])}</span>'
             for s in states]
    return ('<div class="sv-legend" style="display:flex;flex-wrap:wrap;gap:6px 18px;'
            'align-items:center;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:15px;">'
            + "".join(f"<span>{i}</span>" for i in items) + "</div>")


def round_log_rows(run: Run, decode: Callable[[int], str], last: int | None = None) -> list[dict]:
    """One row per round for a table: what was drafted, kept, added, and timings (only the `last` rounds)."""
    rows = []
    for r in run.rounds[-last:] if last else run.rounds:
        extra = ""
        if r.extra_id is not None and r.extra_kind:
            extra = f"{visible(decode(r.extra_id))} ({r.extra_kind})"
        rows.append({
            "round": r.index + 1,
            "k this round": r.k,  # with the best-k chooser, k changes from round to round
            "accepted": r.n_accepted,
            "rejected": visible(decode(r.drafted[r.n_accepted])) if r.rejected else "",
            "correction/bonus": extra,
            "emitted": len(r.emitted),
            "draft ms": round(r.draft_s * 1000, 2),
            "verify ms": round(r.verify_s * 1000, 2),
            # the long text last: a best-k round drafts up to K_MAX tokens, and a table a screen wide
            # would hide every column after it
            "drafted": " | ".join(visible(decode(t)) for t in r.drafted),
            # the first round's passes also read the prompt: its times are not a plain round's
            "note": f"passes also read the prompt ({r.prefill_tokens + 1} tokens)" if r.prefill_tokens else "",
        })
    return rows


# --- terminal ---------------------------------------------------------------
def _fg(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"38;2;{r};{g};{b}"


# SGR codes: colour + a second cue (underline, strike, bold, '+', dotted underline)
ANSI_STYLES = {
    "accepted": f"4;{_fg(STATE_COLORS['accepted'])}",
    "rejected": f"9;2;{_fg(STATE_COLORS['rejected'])}",
    "correction": f"1;7;{_fg(STATE_COLORS['correction'])}",
    "bonus": f"1;{_fg(STATE_COLORS['bonus'])}",
    "pending": f"4:4;{_fg(STATE_COLORS['pending'])}",
    "target": "0",
    "prompt": "2",
}


def _ansi(text: str, state: str) -> str:
    text = text.replace("\n", "⏎\n").replace("\t", "⇥")
    if state == "bonus":
        text += "⁺"
    return f"\x1b[{ANSI_STYLES[state]}m{text}\x1b[0m"


def terminal_tokens(run) -> list[tuple[int, str, bool]]:
    """(token id, state, new) in display order, for a chain Run or a TreeRun: every new token, and before a
    chain round's correction the draft it refused (new=False). A tree's refused nodes are off the text."""
    out: list[tuple[int, str, bool]] = []
    for r in run.rounds:
        if isinstance(r, Round):
            out += [(tok, state, state != "rejected") for tok, state, _ in _round_tokens(r)]
        else:
            out += [(tok, "accepted" if j < r.n_accepted else r.extra_kind or "target", True)
                    for j, tok in enumerate(r.emitted)]
    return out


def ansi_tokens(run, decode: Callable[[int], str], prompt_text: str | None = None,
                texts: Sequence[str] | None = None) -> str:
    """The run's text with ANSI styles per token state, for a terminal.

    texts: the text of each new token in order (cli.token_pieces keeps a multi-byte character whole, on
    its last token, the others ""); without it each token is decode(id). Refused drafts are decode(id).
    """
    parts = [_ansi(prompt_text, "prompt")] if prompt_text else []
    new = iter(texts) if texts is not None else None
    for tok, state, is_new in terminal_tokens(run):
        text = next(new, "") if is_new and new is not None else decode(tok)
        if text:
            parts.append(_ansi(text, state))
    return "".join(parts)


def legend_ansi() -> str:
    """One line explaining the terminal styles."""
    return "  ".join(_ansi(s, s) for s in ("accepted", "rejected", "correction", "bonus"))
