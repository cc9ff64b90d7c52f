"""Citation checking: each claim keeps only the markers of passages that support it.

A small model cites by position more than by content: it writes "[3] [4] [5]" after a
sentence only [3] states, or cites the first passage for a rule the fourth one holds.
Each claim (the text before a run of markers) is compared with every passage given, by
the multilingual embedder, so a Chinese claim is checked against English rule text. A
marker stays when its passage supports the claim about as well as the best one does;
a claim left with no marker cites its best-supporting passage instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

# A claim and the run of [n] markers after it (markers are normalised to [n] first).
_CLAIM = re.compile(r"(?P<claim>[^\[\n]*)(?P<markers>(?:[ \t]*\[\d+\])+)")
_NUMBER = re.compile(r"\d+")
# Support (cosine similarity) a cited passage may fall short of the best passage's and
# still be kept. On this embedder the passage stating a claim scores 0.1-0.3 above the
# others; two passages that both state it score within a few hundredths of each other.
SUPPORT_MARGIN = 0.1
_MIN_CLAIM_CHARS = 8  # shorter claims ("1.", "结论:") carry too little to compare

# Scores of each claim against each passage given: shape (claims, passages).
SupportScorer = Callable[[Sequence[str]], np.ndarray]


def recite(text: str, support: SupportScorer) -> str:
    """Rewrite each claim's markers to the passages that support it."""
    matches = [m for m in _CLAIM.finditer(text) if len(m["claim"].strip()) >= _MIN_CLAIM_CHARS]
    if not matches:
        return text
    scores = support([m["claim"].strip() for m in matches])
    pieces: list[str] = []
    end = 0
    for match, row in zip(matches, scores, strict=True):
        cited = [int(n) for n in _NUMBER.findall(match["markers"])]
        best = float(row.max())
        kept = [n for n in dict.fromkeys(cited) if row[n - 1] >= best - SUPPORT_MARGIN]
        markers = kept or [int(row.argmax()) + 1]
        pieces.append(text[end : match.start("markers")].rstrip(" \t"))
        pieces.append(" " + "".join(f"[{n}]" for n in markers))
        end = match.end()
    pieces.append(text[end:])
    return "".join(pieces)
