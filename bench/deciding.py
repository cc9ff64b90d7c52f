"""The deciding sentence: collect its signals on gold sets, fit its model leave-one-book-out.

    python bench/deciding.py collect --gold FILE [--gold FILE ...] --out ROWS.jsonl
    python bench/deciding.py fit ROWS.jsonl [ROWS.jsonl ...] [--write] [--json]
    python bench/deciding.py threshold EVAL_OUT [EVAL_OUT ...]

`collect` retrieves every gold item's passages in the current Rulekeeper home (no LLM),
ranks their sentences as answers do, and writes one line per item: its book, language,
whether it is answerable, and each candidate sentence's signals (rag.answering.deciding's
FEATURES) with its label, whether it holds gold evidence. Run it once per home whose books
the gold sets ask about.

`fit` scores, for each book left out in turn, a model fitted on the other books: how often
the first sentence shown holds evidence (as quotes were ordered before the deciding
sentence, the closest sentence, the fitted model's likeliest of the quoted ones, and the
one answers show: the closest quoted one read under its section's name), and the two
thresholds on the model's confidence, each chosen on the other books: abstain below one
(at most 5% of their answerable questions), conclude above the other (its best sentence
holds evidence for at least 90% of them).
`--write` fits on every book and writes rag/answering/deciding.toml, and prints the two
thresholds fitted on every book, for settings.

`threshold` reads the items of `rules eval --out` runs made with every conclusion allowed
(generation.conclude_from = 0) and chooses `conclude_from` for each book left out in turn,
on the other books: the lowest confidence from which their shown conclusions are right
(`conclusion_right`) at least 90% of the time. It prints, per book held out, how many
conclusions that shows and how many of them are right, and the threshold chosen on every
book.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.metrics import holds_evidence
from eval.runner import load_gold
from rag.answering.deciding import FEATURES, WEIGHTS_FILE, DecidingModel, sentence_features
from rag.answering.question import Question, Shape
from rag.answering.quotes import make_quotes, quoted_sentences
from rag.errors import GameNotFoundError, InputError
from rag.lang import detect_lang
from rag.pipeline import Pipeline
from rag.settings import load_settings

# The fitted model's regularisation: weights are kept small, as there are few positives.
L2 = 1.0
MOST_ANSWERABLE_ABSTAINING = 0.05
LEAST_CONCLUDED_RIGHT = 0.90


# --- collect ---------------------------------------------------------------------------


def collect(golds: Sequence[Path], out: Path) -> int:
    pipeline = Pipeline(load_settings())
    passages = pipeline.settings.generation.passages
    most = pipeline.settings.generation.quotes
    written = 0
    with out.open("w", encoding="utf-8") as rows:
        for gold in golds:
            for item in load_gold(gold):
                try:
                    game, hits = pipeline.retrieve(item.question, item.game)
                except (GameNotFoundError, InputError) as exc:
                    print(f"skipped {item.id}: {exc}", file=sys.stderr)
                    continue
                lang = detect_lang(item.question)
                searched = Question(
                    item.question,
                    lang,
                    game,
                    book_terms=pipeline.book_terms(item.question, game),
                    book_spelling=pipeline.book_spelling(item.question, game),
                ).searched
                candidates = pipeline.answerer.candidates
                ranked = candidates.rank(searched, hits[:passages])
                quoted = quoted_sentences(
                    Shape.of(item.question, lang),
                    ranked,
                    most,
                    titled=candidates.titled_scores(searched, ranked),
                )
                titled = candidates.by_titled_closeness(searched, quoted)
                quotes, _ = make_quotes(quoted)
                shown_first = quotes[0].text if quotes else None
                row = {
                    "id": item.id,
                    "question": item.question,
                    "set": gold.name,
                    "book": game.slug,
                    "lang": item.lang,
                    "book_lang": game.language,
                    "answerable": item.answerable,
                    "shown_first_holds": bool(
                        shown_first and holds_evidence(shown_first, item.evidence)
                    ),
                    "features": sentence_features(ranked).round(6).tolist(),
                    "labels": [holds_evidence(s.text, item.evidence) for s in ranked],
                    "quoted": [s in quoted for s in ranked],
                    "texts": [s.text for s in ranked],
                    # the deciding sentence as answers choose it (rag.answering.candidates)
                    "titled_first": ranked.index(titled[0]) if titled else None,
                }
                rows.write(json.dumps(row, ensure_ascii=False) + "\n")
                written += 1
    return written


# --- fit -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    id: str
    book: str
    lang: str
    answerable: bool
    shown_first_holds: bool
    features: np.ndarray
    labels: np.ndarray
    quoted: np.ndarray  # the sentences an answer quotes: the deciding one is among them
    titled_first: int | None  # the deciding sentence answers show


def load_rows(paths: Sequence[Path]) -> list[Item]:
    items: dict[str, Item] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            items[row["id"]] = Item(
                id=row["id"],
                book=row["book"],
                lang=row["lang"],
                answerable=row["answerable"],
                shown_first_holds=row["shown_first_holds"],
                features=np.asarray(row["features"], dtype=float).reshape(-1, len(FEATURES)),
                labels=np.asarray(row["labels"], dtype=float),
                quoted=np.asarray(row["quoted"], dtype=bool),
                titled_first=row.get("titled_first"),
            )
    return list(items.values())


def fit(items: Sequence[Item]) -> DecidingModel:
    """Logistic regression by Newton's method, each item weighing as much as any other."""
    x = np.vstack([i.features for i in items if len(i.features)])
    y = np.concatenate([i.labels for i in items if len(i.features)])
    weight = np.concatenate(
        [np.full(len(i.labels), 1 / len(i.labels)) for i in items if len(i.labels)]
    )
    weight *= len(weight) / weight.sum()
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], L2)
    penalty[-1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ beta)))
        gradient = z.T @ (weight * (p - y)) + penalty * beta
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return DecidingModel(
        weights=tuple(float(b) for b in beta[:-1]),
        bias=float(beta[-1]),
        mean=tuple(float(m) for m in mean),
        scale=tuple(float(s) for s in scale),
    )


@dataclass(frozen=True)
class Outcome:
    """One item under a model: its best sentence's confidence and whether it holds evidence,
    the closest sentence's, and whether the evidence is among the best three."""

    item: Item
    confidence: float
    best_holds: bool
    top3_holds: bool
    closest_holds: bool
    shown_holds: bool  # the deciding sentence answers show (closest quoted, read titled)


def outcomes(model: DecidingModel, items: Sequence[Item]) -> list[Outcome]:
    result = []
    for item in items:
        if not len(item.features):
            result.append(Outcome(item, 0.0, False, False, False, False))
            continue
        # As answers choose: the likeliest of the quoted sentences.
        chances = np.where(item.quoted, model.chances(item.features), -1.0)
        order = np.argsort(-chances, kind="stable")
        result.append(
            Outcome(
                item,
                float(chances[order[0]]),
                bool(item.labels[order[0]]),
                bool(item.labels[order[:3]].any()),
                bool(item.labels[0]),
                item.titled_first is not None and bool(item.labels[item.titled_first]),
            )
        )
    return result


def abstain_below(fitted: Sequence[Outcome]) -> float:
    """The highest threshold under which at most 5% of answerable items fall."""
    answerable = sorted(o.confidence for o in fitted if o.item.answerable)
    if not answerable:
        return 0.0
    allowed = int(MOST_ANSWERABLE_ABSTAINING * len(answerable))
    return answerable[allowed]  # items strictly below it abstain: `allowed` of them at most


def conclude_from(fitted: Sequence[Outcome]) -> float:
    """The lowest threshold above which the best sentence holds evidence for 90% or more of
    the answerable items (1.0 when none reaches it)."""
    answerable = sorted((o for o in fitted if o.item.answerable), key=lambda o: -o.confidence)
    best = 1.0
    right = 0
    for shown, outcome in enumerate(answerable, start=1):
        right += outcome.best_holds
        if right / shown >= LEAST_CONCLUDED_RIGHT and shown >= 5:
            best = outcome.confidence
    return best


def _share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 3) if flags else None


def held_out(items: Sequence[Item]) -> dict[str, Any]:
    books = sorted({i.book for i in items})
    report: dict[str, Any] = {}
    everything: list[tuple[Outcome, float, float]] = []
    for book in books:
        train = [i for i in items if i.book != book]
        test = [i for i in items if i.book == book]
        model = fit(train)
        fitted = outcomes(model, train)
        low, high = abstain_below(fitted), conclude_from(fitted)
        scored = outcomes(model, test)
        everything += [(o, low, high) for o in scored]
        report[book] = summary([(o, low, high) for o in scored])
        report[book]["abstain_below"] = round(low, 3)
        report[book]["conclude_from"] = round(high, 3)
    report["held-out, all books"] = summary(everything)
    return report


def summary(scored: Sequence[tuple[Outcome, float, float]]) -> dict[str, Any]:
    answerable = [(o, lo, hi) for o, lo, hi in scored if o.item.answerable]
    unanswerable = [(o, lo, hi) for o, lo, hi in scored if not o.item.answerable]
    concluded = [o for o, lo, hi in answerable if o.confidence >= hi]
    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "shown_first_holds": _share([o.item.shown_first_holds for o, _, _ in answerable]),
        "closest_holds": _share([o.closest_holds for o, _, _ in answerable]),
        "best_holds": _share([o.best_holds for o, _, _ in answerable]),
        "best3_holds": _share([o.top3_holds for o, _, _ in answerable]),
        "shown_holds": _share([o.shown_holds for o, _, _ in answerable]),
        "answerable_abstaining": _share([o.confidence < lo for o, lo, _ in answerable]),
        "unanswerable_abstaining": _share([o.confidence < lo for o, lo, _ in unanswerable]),
        "concluded": _share([o.confidence >= hi for o, _, hi in answerable]),
        "concluded_best_holds": _share([o.best_holds for o in concluded]),
    }


def render(report: dict[str, Any]) -> str:
    keys = ["answerable", "unanswerable", "shown_first_holds", "closest_holds", "best_holds",
            "best3_holds", "shown_holds", "answerable_abstaining", "unanswerable_abstaining",
            "concluded", "concluded_best_holds", "abstain_below", "conclude_from"]  # fmt: skip
    heads = ["ans", "unans", "shown1", "closest", "best", "best3", "deciding", "abst/a",
             "abst/u", "concl", "concl ok", "t_abst", "t_concl"]  # fmt: skip
    lines = [f"{'book (held out)':<32}" + "".join(f"{h:>9}" for h in heads)]
    for book, row in report.items():
        cells = "".join(f"{'' if row.get(k) is None else row[k]!s:>9}" for k in keys)
        lines.append(f"{book:<32}{cells}")
    return "\n".join(lines)


# --- the conclusion threshold ----------------------------------------------------------


@dataclass(frozen=True)
class Concluded:
    """An item of an eval run: its book, confidence, and whether a conclusion was shown
    and was right."""

    book: str
    confidence: float
    shown: bool
    right: bool


def load_concluded(out_dirs: Sequence[Path]) -> list[Concluded]:
    items = []
    for out in out_dirs:
        for line in (out / "items.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            metrics = row["metrics"]
            items.append(
                Concluded(
                    book=metrics["game"],
                    confidence=(row.get("ask") or {}).get("confidence") or 0.0,
                    shown=bool(metrics["conclusion_shown"]),
                    right=bool(metrics.get("conclusion_right")),
                )
            )
    return items


def conclusion_threshold(items: Sequence[Concluded]) -> float:
    """The lowest confidence from which at least 90% of shown conclusions are right (at
    least five shown); 1.0 (never) when none is."""
    shown = sorted((i for i in items if i.shown), key=lambda i: -i.confidence)
    best, right = 1.0, 0
    for count, item in enumerate(shown, start=1):
        right += item.right
        if count >= 5 and right / count >= LEAST_CONCLUDED_RIGHT:
            best = item.confidence
    return best


def held_out_threshold(items: Sequence[Concluded]) -> str:
    lines = [f"{'book (held out)':<32}{'items':>7}{'shown':>7}{'right':>7}"
             f"{'kept':>7}{'kept ok':>9}{'t':>8}"]  # fmt: skip
    totals = [0, 0, 0, 0, 0]
    for book in sorted({i.book for i in items}):
        threshold = conclusion_threshold([i for i in items if i.book != book])
        own = [i for i in items if i.book == book]
        kept = [i for i in own if i.shown and i.confidence >= threshold]
        counts = [len(own), sum(i.shown for i in own), sum(i.right for i in own),
                  len(kept), sum(i.right for i in kept)]  # fmt: skip
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
        lines.append(f"{book:<32}" + "".join(f"{c:>7}" for c in counts[:4])
                     + f"{counts[4]:>9}{threshold:>8.3f}")  # fmt: skip
    lines.append(f"{'held-out, all books':<32}" + "".join(f"{c:>7}" for c in totals[:4])
                 + f"{totals[4]:>9}")  # fmt: skip
    lines.append(f"fitted on every book: conclude from {conclusion_threshold(items):.3f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    collecting = commands.add_parser("collect", help="signals and labels of gold items")
    collecting.add_argument("--gold", type=Path, action="append", required=True)
    collecting.add_argument("--out", type=Path, required=True)
    fitting = commands.add_parser("fit", help="leave-one-book-out figures")
    fitting.add_argument("rows", type=Path, nargs="+")
    fitting.add_argument("--write", action="store_true", help=f"write {WEIGHTS_FILE}")
    fitting.add_argument("--json", action="store_true")
    thresholding = commands.add_parser("threshold", help="conclude_from, leave-one-book-out")
    thresholding.add_argument("out_dirs", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "threshold":
        print(held_out_threshold(load_concluded(args.out_dirs)))
        return 0
    if args.command == "collect":
        print(f"{collect(args.gold, args.out)} items written to {args.out}")
        return 0
    items = load_rows(args.rows)
    report = held_out(items)
    print(json.dumps(report, indent=2) if args.json else render(report))
    if args.write:
        model = fit(items)
        target = Path(__file__).resolve().parent.parent / "rag" / "answering" / WEIGHTS_FILE
        target.write_text(model.to_toml() + "\n", encoding="utf-8")
        fitted = outcomes(model, items)
        print(f"wrote {target}")
        print(f"fitted on every book: abstain below {abstain_below(fitted):.3f}, "
              f"conclude from {conclude_from(fitted):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
