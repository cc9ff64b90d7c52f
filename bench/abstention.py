"""Could the rulebook's silence be told from these signals? Measured on gold sets, not shipped.

For every gold item (answerable or not) the passages are retrieved and the sentences an
answer would quote are chosen as answers choose them. Two signals are read for each:
- closeness: the cosine similarity of the question's closest sentence read under its
  section's name (what the `generation.min_sentence_score` gate reads today);
- judge: the LLM's probability of "yes" against "no" as its first token, asked whether the
  quoted sentences state the answer (bench/prompts/abstention_judge.txt), read from the
  logits of that one token.
It prints each signal's ROC AUC (answerable against unanswerable) and, per threshold, how
many unanswerable items would abstain against how many answerable ones would.

    python bench/abstention.py [--gold FILE ...] [--json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval import DEFAULT_GOLD
from eval.runner import GoldItem, gold_set_parser, load_gold
from rag.answering.candidates import Sentence
from rag.answering.question import Shape
from rag.answering.quotes import quoted_sentences
from rag.answering.selection import numbered
from rag.generation import make_llama_generator
from rag.lang import detect_lang
from rag.pipeline import Pipeline
from rag.prompting import fill, system_message
from rag.settings import load_settings

PROMPT = Path(__file__).with_name("prompts") / "abstention_judge.txt"
THRESHOLDS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


class YesProbability:
    """P(yes) / (P(yes) + P(no)) of a chat reply's first token, with the default GGUF."""

    def __init__(self) -> None:
        self.llm = make_llama_generator(load_settings()).load()
        self.yes = self._first_tokens("yes", "Yes", " yes", " Yes")
        self.no = self._first_tokens("no", "No", " no", " No")

    def _first_tokens(self, *words: str) -> list[int]:
        return sorted({self.llm.tokenize(w.encode(), add_bos=False)[0] for w in words})

    def __call__(self, content: str) -> float:
        from llama_cpp import LogitsProcessorList

        seen: list[float] = []

        def read(_ids: Any, logits: np.ndarray) -> np.ndarray:
            if not seen:
                p = np.exp(logits - logits.max())
                seen.append(float(p[self.yes].sum() / (p[self.yes].sum() + p[self.no].sum())))
            return logits

        self.llm.create_chat_completion(
            messages=[system_message(), {"role": "user", "content": content}],
            max_tokens=1,
            temperature=0,
            logits_processor=LogitsProcessorList([read]),
        )
        return seen[0]


def auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """How often an answerable item scores above an unanswerable one (ties count half)."""
    if not positive or not negative:
        return None
    pairs = [(p > n) + 0.5 * (p == n) for p in positive for n in negative]
    return float(np.mean(pairs))


def judge_prompt(pipeline: Pipeline, template: str, item: GoldItem) -> tuple[str, list[Sentence]]:
    """A judge's prompt (`template`'s text) over the sentences an answer to the item would
    quote, and the item's candidate sentences, closest first."""
    generation = pipeline.settings.generation
    game, hits = pipeline.retrieve(item.question, item.game)
    candidates = pipeline.answerer.candidates
    ranked = candidates.rank(item.question, hits[: generation.passages])
    lang = detect_lang(item.question)
    deciding = quoted_sentences(
        Shape.of(item.question, lang),
        ranked,
        generation.quotes,
        titled=candidates.titled_scores(item.question, ranked),
    )
    content = fill(
        template, "judge", game_title=game.title,
        sentences=numbered(deciding), question=item.question,
    )  # fmt: skip
    return content, ranked


# A judge's prompt for an item from a template's text, and the item's candidate sentences.
PromptOf = Callable[[Pipeline, str, GoldItem], tuple[str, list[Sentence]]]


def judged(
    golds: Sequence[Path],
    template: Path,
    keep: Callable[[GoldItem], bool] = lambda _: True,
    prompt_of: PromptOf = judge_prompt,
) -> Iterator[tuple[str, GoldItem, float, float]]:
    """Each kept item of the gold sets with its gold set's name, the closeness the silence
    gate reads (its closest candidate sentence, read under its section's name) and the
    judge's P(yes) under `template` (over the sentences an answer quotes, unless
    `prompt_of` shows others)."""
    pipeline = Pipeline(load_settings())
    judge = YesProbability()
    text = template.read_text(encoding="utf-8")
    for gold in golds:
        for item in filter(keep, load_gold(gold)):
            content, ranked = prompt_of(pipeline, text, item)
            titled = pipeline.answerer.candidates.titled_scores(item.question, ranked)
            yield gold.name, item, max(titled, default=0.0), judge(content)


def run(golds: Sequence[Path]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for gold, item, closest, p_yes in judged(golds, PROMPT):
        rows.append(
            {
                "gold": gold,
                "id": item.id,
                "answerable": item.answerable,
                "closeness": closest,
                "judge": p_yes,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    return {"items": rows, "signals": {s: summary(rows, s) for s in ("closeness", "judge")}}


def summary(rows: list[dict[str, Any]], signal: str) -> dict[str, Any]:
    answerable = [r[signal] for r in rows if r["answerable"]]
    silent = [r[signal] for r in rows if not r["answerable"]]
    return {
        "auc": auc(answerable, silent),
        "abstaining": {
            str(t): {
                "unanswerable": f"{sum(v < t for v in silent)}/{len(silent)}",
                "answerable": f"{sum(v < t for v in answerable)}/{len(answerable)}",
            }
            for t in THRESHOLDS
        },
    }


def main() -> int:
    parser = gold_set_parser(__doc__, json_help="Print every item's signals too.")
    args = parser.parse_args()
    report = run(args.gold or [DEFAULT_GOLD])
    shown = report if args.json else report["signals"]
    print(json.dumps(shown, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
