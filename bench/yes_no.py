"""Can the LLM's yes or no be trusted? Measured on items with a known polarity, not shipped.

For every gold item with a `polarity` (the probe sets) the passages are retrieved and the
sentences an answer would quote are chosen as answers choose them; the LLM is asked whether,
by those sentences, the answer is yes or no (bench/prompts/yes_no_judge.txt), and its
probability of "yes" against "no" is read from its first token. It prints how often the
likelier word is the right one, overall and among the confident replies, and the ROC AUC of
P(yes) between "yes" and "no" items. What it finds decides `generation.answer_yes_no`.
With --evidence the model is shown instead the rulebook sentences that hold the item's gold
evidence: what it answers when the choice of sentences is not in the way.

    python bench/yes_no.py [--gold FILE ...] [--evidence] [--json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from abstention import auc, judge_prompt, judged

from eval import GOLD_DIR
from eval.metrics import normalise
from eval.runner import GoldItem, gold_set_parser
from rag.answering.candidates import Sentence
from rag.answering.selection import numbered
from rag.pipeline import Pipeline
from rag.prompting import fill
from rag.searching.sentences import passage_sentences
from rag.types import Hit

PROMPT = Path(__file__).with_name("prompts") / "yes_no_judge.txt"
DEFAULT_GOLDS = (GOLD_DIR / "probe.jsonl", GOLD_DIR / "probe-heldout.jsonl")
CONFIDENCES = (0.5, 0.6, 0.7, 0.8, 0.9)


def evidence_prompt(
    pipeline: Pipeline, template: str, item: GoldItem
) -> tuple[str, list[Sentence]]:
    """The judge's prompt over the sentences of the item's rulebook that hold an evidence
    string or lie within one, numbered as answers number theirs (no candidates ranked)."""
    game = pipeline.resolve_game(item.game, item.question)
    evidence = [normalise(e) for e in item.evidence]
    found: dict[str, Sentence] = {}  # by text: a sentence the book repeats is shown once
    for chunk in pipeline.chunks(game.slug):
        for position, text in enumerate(passage_sentences(chunk.text)):
            plain = normalise(text)
            if any(e in plain or plain in e for e in evidence):
                found.setdefault(text, Sentence(Hit(chunk, 0.0, 0), 0, position, text, 0.0))
    content = fill(
        template, "judge", game_title=game.title,
        sentences=numbered(list(found.values())), question=item.question,
    )  # fmt: skip
    return content, []


def run(golds: Sequence[Path], *, evidence: bool = False) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    judging = judged(
        golds,
        PROMPT,
        lambda item: "polarity" in item.probe,
        evidence_prompt if evidence else judge_prompt,
    )
    for gold, item, _, p_yes in judging:
        rows.append(
            {
                "gold": gold,
                "id": item.id,
                "lang": item.lang,
                "polarity": item.probe["polarity"],
                "p_yes": p_yes,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    groups = {
        "all": rows,
        **{gold.name: [r for r in rows if r["gold"] == gold.name] for gold in golds},
        **{lang: [r for r in rows if r["lang"] == lang] for lang in ("en", "zh")},
    }
    return {"items": rows, "summary": {name: summary(group) for name, group in groups.items()}}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def right(row: dict[str, Any]) -> bool:
        return (row["p_yes"] >= 0.5) == (row["polarity"] == "yes")

    by_confidence = {}
    for least in CONFIDENCES:
        confident = [r for r in rows if max(r["p_yes"], 1 - r["p_yes"]) >= least]
        by_confidence[str(least)] = f"{sum(map(right, confident))}/{len(confident)} right"
    return {
        "items": len(rows),
        "right": f"{sum(map(right, rows))}/{len(rows)}",
        "auc": auc(
            [r["p_yes"] for r in rows if r["polarity"] == "yes"],
            [r["p_yes"] for r in rows if r["polarity"] == "no"],
        ),
        "confident_at_least": by_confidence,
    }


def main() -> int:
    parser = gold_set_parser(__doc__, json_help="Print every item's P(yes) too.")
    parser.add_argument(
        "--evidence",
        action="store_true",
        help="Show the model the sentences holding the gold evidence, not those quoted.",
    )
    args = parser.parse_args()
    report = run(args.gold or list(DEFAULT_GOLDS), evidence=args.evidence)
    print(json.dumps(report if args.json else report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
