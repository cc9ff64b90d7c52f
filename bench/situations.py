"""Which questions the situations check judges: its question wording against labelled phrases.

`eval/situation-phrases.jsonl` holds player questions, written blind by a helper, each
labelled whether it asks about a supply running out (a deck, tokens, coins, cards in hand)
or uses the same words otherwise (an empty space, out of range, out of actions, no more
than). The check judges a question when its `asks` wording matches and its `unlike` wording
does not (rag/prompts/situations.toml); a question judged that is not about running out can
be told "the rulebook does not seem to say" wrongly, one missed keeps the ordinary answer.
No model runs.

    python bench/situations.py [FILE] [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rag.answering.situations import situations

PHRASES = Path(__file__).parents[1] / "eval" / "situation-phrases.jsonl"


def main(argv: list[str]) -> None:
    path = Path(next((a for a in argv if not a.startswith("--")), PHRASES))
    phrases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    runs_out = next(s for s in situations() if s.name == "runs_out")
    # (judged by the check, about running out) per phrase
    read = [(runs_out.asked(p["q"], p["lang"]), p["supply_runs_out"]) for p in phrases]
    figures = {
        "phrases": len(phrases),
        "about running out": sum(about for _, about in read),
        "judged": sum(judged for judged, _ in read),
        "judged and about running out": sum(judged and about for judged, about in read),
        "misread": [
            (p["q"], about)
            for p, (judged, about) in zip(phrases, read, strict=True)
            if judged != about
        ],
    }
    if "--json" in argv:
        print(json.dumps(figures, ensure_ascii=False, indent=2))
        return
    for name, value in figures.items():
        if name != "misread":
            print(f"{name:30s} {value}")
    for question, about in figures["misread"]:
        print(f"  {'missed' if about else 'judged wrongly':15s} {question}")


if __name__ == "__main__":
    main(sys.argv[1:])
