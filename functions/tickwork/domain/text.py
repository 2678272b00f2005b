"""Which characters user text may hold. Names, descriptions and tags are shown in terminals and consoles: a
control character there can ring the bell, move the cursor, recolour the screen (ANSI escapes) or reorder
what the reader sees (bidirectional overrides, as in "Trojan Source")."""

from __future__ import annotations

import unicodedata

# Explicit bidirectional formatting: embeddings, overrides, isolates and the implicit marks.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def forbidden_characters(text: str, *, allow_line_breaks: bool = False) -> list[str]:
    """The characters of `text` it may not hold, as U+XXXX (empty: the text is fine). C0/C1 controls
    (NUL, BEL, ESC, DEL ...) and bidi controls are refused; tab and newline only where line breaks are
    allowed (descriptions)."""
    allowed = {"\t", "\n"} if allow_line_breaks else set()
    found = [
        ch for ch in text if ch not in allowed and (unicodedata.category(ch) == "Cc" or ch in BIDI_CONTROLS)
    ]
    return [f"U+{ord(ch):04X}" for ch in dict.fromkeys(found)]


def text_pattern(*, allow_line_breaks: bool = False) -> str:
    """The rule of `forbidden_characters` as a regular expression (for the API document): C0/C1 controls
    and bidi controls excluded, tab and newline kept where line breaks are allowed."""
    controls = r"\u0000-\u0008\u000b-\u001f" if allow_line_breaks else r"\u0000-\u001f"
    bidi = "".join(f"\\u{ord(ch):04x}" for ch in sorted(BIDI_CONTROLS))
    return rf"^[^{controls}\u007f-\u009f{bidi}]*$"
