"""Untrusted text made inert Markdown, for everything kernelpro writes that GitHub renders (the bot's
comments and PR bodies, the runner's report.md, which the optimize job shows as its summary)."""

from __future__ import annotations

import re

# Control, bidi, invisible (soft hyphen, word joiners, Arabic letter mark) and tag characters.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069"
                      r"\ufeff\U000e0000-\U000e007f]")
_MD_SPECIAL = re.compile(r"([\\*_\[\]|~#!()])")
_INERT = re.compile(r"[`@#]|://|(?i:www)\.|(?i:gh)-(?=\d)|(?i:\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b)")
"""What GitHub turns into code, mentions, links or references (``GH-123`` is an issue reference, a run of
7 to 40 hex digits a commit link); one pass, so no entity is re-read."""
_INERT_AS = {"`": "&#96;", "@": "@&#8203;", "#": "#&#8203;", "://": ":&#8203;//"}
"""Their inert spellings (``www.`` in any case gets a zero-width space before its dot)."""


def strip_control(text: str, *, keep_newlines: bool = False) -> str:
    """Remove control and bidi-override characters; tabs (and newlines unless kept) become spaces."""
    if keep_newlines:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        return _CONTROL.sub("", text.replace("\t", "    "))
    return _CONTROL.sub("", re.sub(r"[\t\n\r]+", " ", text))


def md(value: object, limit: int = 300) -> str:
    """Untrusted text as inert inline Markdown: one line, bounded, no HTML, no mentions.

    Control characters are removed, the text is cut to ``limit`` characters, Markdown punctuation
    is backslash-escaped, ``& < > "`` and backticks become entities, and a zero-width space breaks
    everything GitHub would turn into a link or a notification by itself: after ``@`` (mentions,
    e-mail addresses), inside ``://`` (bare URLs of any scheme), after ``www`` (``www.`` hosts)
    after ``#`` and ``GH`` (issue references) and inside runs of hex digits (commit links). Escaping alone does not do it: GitHub autolinks text, and
    a backslash-escaped ``https\\://`` is still the text ``https://``.
    """
    text = " ".join(strip_control(str(value)).split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
    return _INERT.sub(_inert, text)


def _inert(m: re.Match[str]) -> str:
    got = m.group(0)
    if got in _INERT_AS:
        return _INERT_AS[got]
    if got[-1] == "-":  # GH-
        return got[:2] + "&#8203;-"
    if got[-1] == ".":  # www.
        return got[:3] + "&#8203;."
    return got[:6] + "&#8203;" + got[6:]  # a commit id


def code_block(text: str, lang: str = "") -> str:
    """Text in a fenced code block whose fence no line of the text can close."""
    body = strip_control(text, keep_newlines=True)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    if not body.endswith("\n"):
        body += "\n"
    return f"{fence}{lang}\n{body}{fence}"
