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
from rag.types import Lang

PHRASES = Path(__file__).parents[1] / "eval" / "situation-phrases.jsonl"


def judged(question: str, lang: Lang) -> bool:
    """Whether the running-out check would judge the question."""
    runs_out = next(s for s in situations() if s.name == "runs_out")
    asks, unlike = runs_out.asks.get(lang), runs_out.unlike.get(lang)
    return bool(asks and asks.search(question)) and not (unlike and unlike.search(question))


def main(argv: list[str]) -> None:
    path = Path(next((a for a in argv if not a.startswith("--")), PHRASES))
    phrases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    wrong = [p for p in phrases if judged(p["q"], p["lang"]) != p["supply_runs_out"]]
    judged_right = sum(p["supply_runs_out"] for p in phrases if judged(p["q"], p["lang"]))
    figures = {
        "phrases": len(phrases),
        "about running out": sum(p["supply_runs_out"] for p in phrases),
        "judged": sum(judged(p["q"], p["lang"]) for p in phrases),
        "judged and about running out": judged_right,
        "misread": [(p["q"], p["supply_runs_out"]) for p in wrong],
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
