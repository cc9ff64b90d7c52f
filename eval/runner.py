"""Run a gold Q&A file through the pipeline and score it (`rules eval`).

Any JSONL file in the format of docs/eval-format.md runs, not only the project's gold set.
Each item is asked through `Pipeline.ask`; an item the pipeline refuses (its game cannot be
resolved, its question is unusable) is scored as a failure and recorded with its error,
while a broken setup (missing model, corrupt index) stops the run with its own error.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from eval.metrics import (
    PROBE_FIELDS,
    ItemScore,
    abstention_correct,
    answer_language,
    build_report,
    deciding_line,
    facts_covered,
    first_hit_rank,
    holds_evidence,
    supported_citations,
    terms_rendered_otherwise,
    way_round_problems,
)
from rag.answering.checks import numbers_check
from rag.errors import GameNotFoundError, InputError
from rag.pipeline import Pipeline
from rag.prompting import phrases
from rag.reading.glossary import Glossary
from rag.types import LANGS, Answer, Lang, Quote

ITEMS_FILE = "items.jsonl"
REPORT_FILE = "report.json"
RETRIEVAL_DEPTH = 5  # hit@5 needs the top five passages whatever k the answer uses
UNRESOLVED = "(unresolved)"  # by_game key of items whose game could not be resolved

GOLD_FIELDS = (
    "id", "game", "question", "lang", "answerable", "evidence", "answer", "key_facts", "type",
)  # fmt: skip
GOLD_TYPES = (
    "lookup", "procedure", "condition", "exception", "multi_hop", "definition", "unanswerable",
)  # fmt: skip


# --- the gold file ----------------------------------------------------------------------


@dataclass(frozen=True)
class GoldItem:
    id: str
    game: str | None
    question: str
    lang: Lang
    answerable: bool
    evidence: tuple[str, ...]
    answer: str
    key_facts: tuple[tuple[str, ...], ...]
    type: str
    raw: dict[str, Any]  # the line as written, extra fields included, echoed into items.jsonl

    @property
    def probe(self) -> dict[str, Any]:
        """The probe fields (polarity, right_way, wrong_way) the item has; empty if none."""
        return {name: self.raw[name] for name in PROBE_FIELDS if name in self.raw}


def _text(data: dict[str, Any], name: str, *, allow_empty: bool = False) -> str:
    value = data[name]
    if not isinstance(value, str) or not (allow_empty or value.strip()):
        raise ValueError(f"{name!r} must be a non-empty string")
    return value


def _texts(value: Any, name: str) -> tuple[str, ...]:
    """A list of non-empty strings: an empty one would match every passage or answer."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{name!r} must be a list of non-empty strings")
    return tuple(value)


def _choice(data: dict[str, Any], name: str, choices: Sequence[str]) -> str:
    value = data[name]
    if value not in choices:
        raise ValueError(f"{name!r} must be one of {', '.join(choices)}, not {value!r}")
    return str(value)


def parse_item(data: Any) -> GoldItem:
    """One gold line, checked field by field; raises ValueError saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("each line must be a JSON object")
    missing = [name for name in GOLD_FIELDS if name not in data]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    if not isinstance(data["answerable"], bool):
        raise ValueError("'answerable' must be true or false")
    if data["game"] is not None:
        _text(data, "game")
    evidence = _texts(data["evidence"], "evidence")
    if data["answerable"] and not evidence:
        raise ValueError("an answerable item needs at least one evidence string")
    if not isinstance(data["key_facts"], list):
        raise ValueError("'key_facts' must be a list of lists of strings")
    key_facts = tuple(_texts(fact, "key_facts[]") for fact in data["key_facts"])
    if not all(key_facts):
        raise ValueError("each key fact needs at least one wording")
    if "polarity" in data:
        _choice(data, "polarity", ("yes", "no"))
    for name in ("right_way", "wrong_way"):
        if name in data:
            _texts(data[name], name)
    return GoldItem(
        id=_text(data, "id"),
        game=data["game"],
        question=_text(data, "question"),
        lang="zh" if _choice(data, "lang", ("en", "zh")) == "zh" else "en",
        answerable=data["answerable"],
        evidence=evidence,
        answer=_text(data, "answer", allow_empty=True),
        key_facts=key_facts,
        type=_choice(data, "type", GOLD_TYPES),
        raw=data,
    )


def load_gold(path: Path) -> list[GoldItem]:
    """Every item of a gold JSONL file; blank lines are skipped, a bad line names its number."""
    try:
        # utf-8-sig: files saved by Windows editors start with a byte-order mark.
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError as exc:
        raise InputError(f"Gold file {path} not found.") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Cannot read gold file {path}: {exc}") from exc
    items: list[GoldItem] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = parse_item(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg}).") from exc
        except ValueError as exc:
            raise InputError(f"{path}:{number}: {exc}.") from exc
        if item.id in first_line:
            raise InputError(
                f"{path}:{number}: duplicate id {item.id!r} (first on line {first_line[item.id]})."
            )
        first_line[item.id] = number
        items.append(item)
    if not items:
        raise InputError(f"Gold file {path} holds no items.")
    return items


def gold_set_parser(doc: str | None, *, json_help: str) -> argparse.ArgumentParser:
    """The options every benchmark over gold sets takes: --gold (repeatable) and --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--gold", type=Path, action="append", help="A gold set (repeatable).")
    parser.add_argument("--json", action="store_true", help=json_help)
    return parser


def _item_slug(pipeline: Pipeline, item: GoldItem) -> str | None:
    """The game the item names (its game field, or the question): no model is run to select."""
    try:
        return pipeline.resolve_game(item.game, item.question, by_content=False).slug
    except GameNotFoundError:
        return None


def select_items(
    pipeline: Pipeline,
    items: Sequence[GoldItem],
    game: str | None = None,
    limit: int | None = None,
) -> list[GoldItem]:
    """The items about one game (named as players do: title, slug or alias), then the first N."""
    if game is not None:
        slug = pipeline.corpus.resolve(game).slug  # an unknown game is the user's error
        items = [item for item in items if _item_slug(pipeline, item) == slug]
    return list(items[:limit] if limit is not None else items)


# --- running ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemResult:
    item: GoldItem
    score: ItemScore
    answer: dict[str, Any] | None  # the `rules ask --json` object; None when the item failed

    def to_json(self, ks: Sequence[int]) -> dict[str, Any]:
        return {"gold": self.item.raw, "ask": self.answer, "metrics": self.score.to_json(ks)}


Progress = Callable[[ItemResult, int, int], None]  # (result, done, total)


def _failure(item: GoldItem, game: str, error: Exception) -> ItemResult:
    score = ItemScore(
        lang=item.lang,
        game=game,
        type=item.type,
        answerable=item.answerable,
        facts=(False,) * len(item.key_facts),
        error=f"{type(error).__name__}: {error}",
    )
    return ItemResult(item, score, None)


def _ranked_texts(pipeline: Pipeline, item: GoldItem, answer: Answer, k: int) -> list[str]:
    """Passage texts, best first, at least RETRIEVAL_DEPTH deep when the game has that many.

    Below that depth the passages are fetched again rather than asking with a larger k,
    which would put more passages in the prompt and change the answer being measured.
    """
    hits = answer.passages
    if k < RETRIEVAL_DEPTH:
        _, hits = pipeline.retrieve(item.question, answer.game, RETRIEVAL_DEPTH)
    return [hit.chunk.text for hit in hits]


def _score(
    item: GoldItem,
    answer: Answer,
    ranked: Sequence[str],
    latency_s: float,
    game_names: Sequence[str] = (),
    glossary: Glossary | None = None,
) -> ItemScore:
    conclusion = answer.conclusion
    right_way = None
    if item.probe and conclusion:
        right_way = not way_round_problems(conclusion, item.lang, item.probe)
    deciding = next((q for q in answer.quotes if q.deciding), None)
    deciding_holds = deciding is not None and holds_evidence(deciding.text, item.evidence)
    conclusion_right = None
    if conclusion is not None:
        conclusion_right = (
            item.answerable and deciding_holds and any(facts_covered(conclusion, item.key_facts))
        )
    return ItemScore(
        lang=item.lang,
        game=answer.game or UNRESOLVED,
        type=item.type,
        answerable=item.answerable,
        first_hit=first_hit_rank(ranked, item.evidence),
        facts=facts_covered(without_fixed_lines(answer.answer), item.key_facts),
        abstained_ok=abstention_correct(answer.abstained, item.answerable),
        citations=len(answer.citations),
        supported=supported_citations((c.text for c in answer.citations), item.evidence),
        # A shown conclusion is what the player reads first: it must be in their language
        # (the headings and renderings around an English one would make the whole read zh).
        answer_lang=answer_language(conclusion or answer.answer),
        latency_s=round(latency_s, 4),
        concluded=conclusion is not None,
        right_way=right_way,
        probe=bool(item.probe),
        invented_number=conclusion is not None
        and invents_a_number(conclusion, answer.quotes, game_names),
        renderings_shown=sum(q.rendering is not None for q in answer.quotes),
        renderings_withheld=sum(q.rendering_withheld for q in answer.quotes),
        deciding_holds=deciding_holds if item.answerable else None,
        conclusion_right=conclusion_right,
        deciding_line=deciding_line(answer.quotes, item.lang),
        terms_otherwise=terms_rendered_otherwise(answer.quotes, glossary),
    )


# Lines every answer of a kind carries, in either language; they may hold words that are
# key facts of some question ("no", "cannot", 不能) and must not count as stating them.
FIXED_LINES = (
    "not_answered",
    "not_covered",
    "read_the_rule",
    "read_the_rule_yes_no",
    "reminder",
    "rendering_withheld",
)


def without_fixed_lines(answer: str) -> str:
    """The answer's text as scored for key facts: what Rulekeeper found and concluded."""
    for lang in LANGS:
        words = phrases(lang)
        for name in FIXED_LINES:
            answer = answer.replace(words[name].strip(), " ")
    return answer


def invents_a_number(
    conclusion: str, quotes: Sequence[Quote], game_names: Sequence[str] = ()
) -> bool:
    """The conclusion fails the answers' numbers check against every quote shown: it states
    a number no quote states, or counts a thing otherwise than the quotes do ("roll one
    die" beside "Roll the two Spawn dice")."""
    return not numbers_check(conclusion, quotes, game_names).passed


def evaluate_item(pipeline: Pipeline, item: GoldItem, k: int) -> ItemResult:
    """Ask one gold question and score the answer; refusals become failure results."""
    try:
        game = pipeline.resolve_game(item.game, item.question)
    except GameNotFoundError as exc:
        return _failure(item, UNRESOLVED, exc)
    started = time.perf_counter()
    try:
        answer = pipeline.ask(item.question, game.slug, k)
    except InputError as exc:
        return _failure(item, game.slug, exc)
    latency_s = time.perf_counter() - started
    ranked = _ranked_texts(pipeline, item, answer, k)
    score = _score(item, answer, ranked, latency_s, game.names(), pipeline.glossary(game.slug))
    return ItemResult(item, score, answer.to_json())


def _open_items(out_dir: Path | None) -> AbstractContextManager[IO[str] | None]:
    if out_dir is None:
        return nullcontext()
    out_dir.mkdir(parents=True, exist_ok=True)
    return (out_dir / ITEMS_FILE).open("w", encoding="utf-8")


def _stored_score(item: GoldItem, metrics: dict[str, Any]) -> ItemScore:
    """An item's score as an earlier run wrote it to items.jsonl."""
    return ItemScore(
        lang=item.lang,
        game=metrics["game"],
        type=item.type,
        answerable=item.answerable,
        first_hit=metrics["first_hit_rank"],
        facts=tuple(metrics["key_facts_covered"]),
        abstained_ok=metrics["abstention_correct"],
        citations=metrics["citations"],
        supported=metrics["citations_supported"],
        answer_lang=metrics["answer_lang"],
        latency_s=metrics["latency_s"],
        error=metrics["error"],
        concluded=metrics.get("conclusion_shown", False),
        right_way=metrics.get("right_way_round"),
        probe=bool(item.probe),
        invented_number=metrics.get("invented_number", False),
        renderings_shown=metrics.get("renderings_shown", 0),
        renderings_withheld=metrics.get("renderings_withheld", 0),
        deciding_holds=metrics.get("deciding_holds_evidence"),
        conclusion_right=metrics.get("conclusion_right"),
        deciding_line=metrics.get("deciding_line"),
        terms_otherwise=metrics.get("terms_rendered_otherwise", 0),
    )


def stored_results(out_dir: Path, items: Sequence[GoldItem]) -> dict[str, tuple[str, ItemScore]]:
    """The lines an interrupted run kept in out_dir/items.jsonl, with their scores, by item
    id: only items still in the gold file; a torn last line is left out (asked again)."""
    by_id = {item.id: item for item in items}
    stored: dict[str, tuple[str, ItemScore]] = {}
    path = out_dir / ITEMS_FILE
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    for line in lines:
        try:
            data = json.loads(line)
            item = by_id.get(data["gold"]["id"])
            if item is not None:
                stored[item.id] = (line, _stored_score(item, data["metrics"]))
        except (ValueError, KeyError, TypeError):
            continue
    return stored


def _settings_summary(pipeline: Pipeline) -> dict[str, Any]:
    """The settings a comparison varies, so a saved report says what produced it."""
    s = pipeline.settings
    summary: dict[str, Any] = {
        "embedding.model": s.embedding.model,
        "retrieval.mode": s.retrieval.mode,
        "retrieval.rerank": s.retrieval.rerank,
        "generation.backend": s.generation.backend,
        "generation.model": s.generation.model,
    }
    # With a server backend, the model is the one the server was asked for.
    if s.embedding.backend == "openai":
        summary["openai.embedding_model"] = s.openai.embedding_model
    if s.generation.backend == "openai":
        summary["openai.chat_model"] = s.openai.chat_model
    return summary


def run_eval(
    pipeline: Pipeline,
    items: Sequence[GoldItem],
    *,
    k: int | None = None,
    out_dir: Path | None = None,
    progress: Progress | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Ask every item, score it and return the report (the `rules eval --json` object).

    With out_dir, each item's line goes to items.jsonl as soon as it is scored (an
    interrupted run keeps what it did), and the report to report.json at the end; with
    resume, items already in that items.jsonl are not asked again but counted as scored.
    k defaults to the settings' retrieval.k.
    """
    k = k or pipeline.settings.retrieval.k
    ks = (1, RETRIEVAL_DEPTH, k)
    earlier = stored_results(out_dir, items) if resume and out_dir is not None else {}
    pipeline.ensure_index()  # loaded (or built) here, not timed as the first item's latency
    scores: list[ItemScore] = []
    with _open_items(out_dir) as sink:
        for done, item in enumerate(items, start=1):
            if item.id in earlier:
                line, score = earlier[item.id]
                scores.append(score)
                if sink is not None:
                    sink.write(line + "\n")
                continue
            result = evaluate_item(pipeline, item, k)
            scores.append(result.score)
            if sink is not None:
                sink.write(json.dumps(result.to_json(ks), ensure_ascii=False) + "\n")
                sink.flush()
            if progress is not None:
                progress(result, done, len(items))
    report = {
        **build_report(scores, ks),
        "k": k,
        "backend": pipeline.generator.name,
        "settings": _settings_summary(pipeline),
    }
    if out_dir is not None:
        text = json.dumps(report, indent=2, ensure_ascii=False)
        (out_dir / REPORT_FILE).write_text(text + "\n", encoding="utf-8")
    return report


# --- the terminal table -----------------------------------------------------------------


class Column(NamedTuple):
    """One figure of a report summary, as the terminal table and the compare report show it."""

    header: str
    section: str
    key: str

    @property
    def lower_is_better(self) -> bool:
        return self.section == "latency"

    def value(self, summary: dict[str, Any]) -> float | None:
        value = summary[self.section][self.key]
        return None if value is None else float(value)


COLUMNS = (
    Column("hit@1", "retrieval", "hit@1"),
    Column("hit@5", "retrieval", "hit@5"),
    Column("mrr", "retrieval", "mrr"),
    Column("facts", "answer", "key_fact_recall"),
    Column("abstain", "answer", "abstention_accuracy"),
    Column("cite", "answer", "citation_precision"),
    Column("lang", "answer", "language_match"),
    Column("p50 s", "latency", "p50_s"),
    Column("p95 s", "latency", "p95_s"),
)
LEGEND = (
    "facts = key-fact recall, abstain = abstention accuracy, cite = citation precision, "
    "lang = language match; - = nothing to measure in that group"
)


def format_value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_table(rows: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Aligned plain text: one row per (label, summary), one column per figure."""
    header = ["", "n", "failed", *(c.header for c in COLUMNS)]
    body = [
        [label, str(s["n"]), str(s["errors"]), *(format_value(c.value(s)) for c in COLUMNS)]
        for label, s in rows
    ]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (header, *body)
    ]
    return "\n".join(lines)


def render_table(report: dict[str, Any]) -> str:
    """The report for a terminal: overall, then per language, game and question type."""
    rows: list[tuple[str, dict[str, Any]]] = [("all", report)]
    for group in ("by_lang", "by_game", "by_type"):
        prefix = group.removeprefix("by_")
        rows += [(f"{prefix}: {name}", summary) for name, summary in report[group].items()]
    title = (
        f"{report['n']} items ({report['errors']} failed), k = {report['k']}, "
        f"answered by {report['backend']}"
    )
    return f"{title}\n\n{format_table(rows)}\n\n{LEGEND}"
