"""Which sentences to quote: ways of choosing the rule text compared on gold sets, no LLM.

For each answerable gold item the passages are retrieved and their sentences ranked by
the embedder once; each way of choosing then quotes some of them, and the answer the quote
layer would show is scored as `rules eval` scores it: key-fact recall (over the whole
shown text) and citation precision (cited passages that hold the gold evidence).

    python bench/quotes.py [--gold FILE ...] [--json]

It runs against the index in the Rulekeeper home (RULEKEEPER_HOME), so a gold set about
books added with `rules add` is measured where they were added. The closeness gate
(`generation.min_sentence_score`) applies as in answers: an item it silences covers none
of its key facts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from eval import DEFAULT_GOLD
from eval.metrics import facts_covered, ratio, supported_citations
from eval.runner import GoldItem, format_value, gold_set_parser, load_gold
from rag.answering.assembly import quoted_answer
from rag.answering.candidates import Sentence
from rag.answering.question import Shape
from rag.answering.quotes import (
    BY_SENTENCES,
    BY_SENTENCES_AND_PASSAGE,
    TITLED_SHARE,
    PassageChoice,
    deciding_sentences,
    make_quotes,
    quoted_sentences,
)
from rag.lang import detect_lang
from rag.pipeline import Pipeline
from rag.settings import load_settings
from rag.types import Hit, Lang

# A way of choosing: the quoted sentences for a question (in its language) from its ranked
# candidate sentences and their closeness read under their sections' names.
Choice = Callable[[str, Lang, Sequence[Sentence], Sequence[float]], list[Sentence]]


def closest_of_all(most: int) -> Choice:
    """The closest sentences of all passages (the first quote layer, kept to compare against)."""
    return lambda question, lang, ranked, titled: list(ranked[:most])


def one_passage(most: int, choice: PassageChoice) -> Choice:
    """The closest sentences of the passage that answers best by `choice`."""
    return lambda question, lang, ranked, titled: deciding_sentences(ranked, most, choice)


def as_answers_choose(most: int, titled_share: float = TITLED_SHARE) -> Choice:
    """The sentences answers quote (`quoted_sentences`), a sentence's closeness
    `titled_share` read under its section's name."""
    return lambda question, lang, ranked, titled: quoted_sentences(
        Shape.of(question, lang), ranked, most, titled=titled, titled_share=titled_share
    )


def first_passage(most: int) -> Choice:
    """The closest sentences of the passage retrieval ranked first."""
    return lambda question, lang, ranked, titled: [s for s in ranked if s.passage == 0][:most]


# (passage_weight, lexical_weight, rank_penalty) around the default's.
WEIGHTS = [(0, 0, 0.04), (0.5, 0, 0), (0.5, 0, 0.04), (0.5, 0.1, 0.04), (0.25, 0.1, 0.04),
           (1.0, 0.1, 0.04), (0.5, 0.1, 0.02)]  # fmt: skip

CHOICES: dict[str, Choice] = {
    "closest 3 of all passages": closest_of_all(3),
    "closest 5 of all passages": closest_of_all(5),
    "retrieval's first passage, 5 quotes": first_passage(5),
    **{
        f"one passage by its {summed} closest, {most} quotes": one_passage(
            most, replace(BY_SENTENCES, summed=summed)
        )
        for most in (5, 7)
        for summed in (1, 2, 3)
    },
    **{
        f"by 2 closest + {w} x passage, {lex} x keywords, less {p} a place, 7 quotes": (
            one_passage(
                7, replace(BY_SENTENCES, passage_weight=w, lexical_weight=lex, rank_penalty=p)
            )
        )
        for w, lex, p in WEIGHTS
    },
    **{
        f"default, a one-sentence passage's sentence again at {lone}, 7 quotes": one_passage(
            7, replace(BY_SENTENCES_AND_PASSAGE, lone_weight=lone)
        )
        for lone in (0.3, 0.35, 0.4, 0.45, 0.5)
    },
    **{
        f"as answers choose (both passages for when-not questions they disagree on), "
        f"{most} quotes": as_answers_choose(most)
        for most in (7, 10, 12, 15)
    },
    **{
        f"as answers choose, 12 quotes, closeness {share} read under the section's name": (
            as_answers_choose(12, share)
        )
        for share in (0.0, 0.25, 0.5, 0.75, 1.0)
    },
}


# The item, its language, game, hits, ranked sentences and their closeness read under their
# sections' names (the gate reads the highest).
Row = tuple[GoldItem, Lang, str, list[Hit], list[Sentence], list[float]]


def _ranked(pipeline: Pipeline, item: GoldItem) -> Row:
    """The item with its language, game, hits and ranked sentences: computed once for all
    the ways of choosing."""
    game, hits = pipeline.retrieve(item.question, item.game)
    gen = pipeline.settings.generation
    candidates = pipeline.answerer.candidates
    ranked = candidates.rank(item.question, hits[: gen.passages])
    titled = candidates.titled_scores(item.question, ranked)
    return item, detect_lang(item.question), game.slug, hits, ranked, titled


def _score(rows: list[Row], choice: Choice, gate: float) -> dict[str, Any]:
    facts: list[bool] = []
    cited = supported = quoted = 0
    for item, lang, slug, hits, ranked, titled in rows:
        if max(titled, default=0.0) < gate:
            facts += [False] * len(item.key_facts)
            continue
        quotes, _ = make_quotes(choice(item.question, lang, ranked, titled))
        answer = quoted_answer(
            item.question, slug, lang, quotes=quotes, conclusion=None,
            checks=[], hits=hits, backend="bench",
        )  # fmt: skip
        facts += facts_covered(answer.answer, item.key_facts)
        cited += len(answer.citations)
        supported += supported_citations((c.text for c in answer.citations), item.evidence)
        quoted += len(quotes)
    return {
        "key_fact_recall": ratio(sum(facts), len(facts)),
        "citation_precision": ratio(supported, cited),
        "quotes_per_answer": ratio(quoted, len(rows)),
        "passages_cited_per_answer": ratio(cited, len(rows)),
    }


def run(golds: Sequence[Path]) -> dict[str, Any]:
    pipeline = Pipeline(load_settings())
    gate = pipeline.settings.generation.min_sentence_score
    report: dict[str, Any] = {"embedding_model": pipeline.embedder.name, "golds": {}}
    for gold in golds:
        rows = [_ranked(pipeline, item) for item in load_gold(gold) if item.answerable]
        report["golds"][str(gold)] = {
            "items": len(rows),
            "choices": {name: _score(rows, choice, gate) for name, choice in CHOICES.items()},
        }
    return report


def render(report: dict[str, Any]) -> str:
    lines = [f"embedder {report['embedding_model']}"]
    for gold, result in report["golds"].items():
        lines += ["", f"gold {gold}: {result['items']} answerable items"]
        lines.append(f"{'choice':<58}{'recall':>8}{'cite':>8}{'quotes':>8}{'cited':>8}")
        for name, s in result["choices"].items():
            figures = "".join(
                f"{format_value(s[key]):>8}"
                for key in ("key_fact_recall", "citation_precision", "quotes_per_answer",
                            "passages_cited_per_answer")
            )  # fmt: skip
            lines.append(f"{name:<58}{figures}")
    return "\n".join(lines)


def main() -> int:
    parser = gold_set_parser(__doc__, json_help="Print the report as JSON.")
    args = parser.parse_args()
    report = run(args.gold or [DEFAULT_GOLD])
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
