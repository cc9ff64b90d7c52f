"""Validate the gold Q&A evaluation set (eval/gold/gold.jsonl).

Needs the standard library and eval.metrics (the eval's own right-way-round check), and for
PDF rulebooks the PDF reader `rules add` uses. Usage:

    python3 eval/validate_gold.py [--gold eval/gold/gold.jsonl] [--corpus corpus]

Books added with `rules add` are validated against their home's books folder, e.g.
`--gold eval/gold/real-rulebooks.jsonl --corpus $RULEKEEPER_HOME/books`.

Prints every problem found plus a summary, and exits 1 if there is any problem.

Optional probe fields (eval/gold/probe.jsonl), each checked against the item's own answer:
polarity ("yes"/"no": the answer opens with that conclusion), right_way (the answer contains
one of these strings) and wrong_way (the answer contains none of them); case-folded substrings.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.metrics import PROBE_FIELDS, way_round_problems
from rag.errors import IngestError
from rag.types import Lang

FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "game": (str, type(None)),
    "question": (str,),
    "lang": (str,),
    "answerable": (bool,),
    "evidence": (list,),
    "answer": (str,),
    "key_facts": (list,),
    "type": (str,),
}
# Optional fields of probe items: whether a conclusion is the right way round.
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "polarity": (str,),
    "right_way": (list,),
    "wrong_way": (list,),
}
POLARITIES = frozenset({"yes", "no"})
LANGS = frozenset({"en", "zh"})
TYPES = frozenset(
    {"lookup", "procedure", "condition", "exception", "multi_hop", "definition", "unanswerable"}
)
MIN_EVIDENCE_CHARS = 15
_WS = re.compile(r"\s+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_ROOT = Path(__file__).resolve().parent.parent


def norm(text: str) -> str:
    """Collapse whitespace and case-fold (the matching rule of the eval format)."""
    return _WS.sub(" ", text).strip().casefold()


@dataclass
class Game:
    slug: str
    names: set[str] = field(default_factory=set)  # case-folded title, slug and aliases
    text: str = ""  # normalised rulebook text


def rulebook_text(path: Path) -> str:
    """A rulebook's text: a book added with `rules add` (PDF, Markdown, HTML) read by its
    own reader (rag.reading.files), one paragraph a line (headings without their '#'), so
    that markup and escapes are read as answers read them; plain text as UTF-8 text."""
    if path.suffix.casefold() == ".txt":
        return path.read_text(encoding="utf-8")
    from rag.reading.files import load_document

    text = load_document(path, path.parent.name).text
    return "\n".join(line.lstrip("#").strip() for line in text.splitlines())


def load_corpus(corpus_dir: Path) -> tuple[dict[str, Game], list[str]]:
    """Read every <slug>/manifest.toml under `corpus_dir` (the built-in corpus, or the books
    folder of a Rulekeeper home) and its rulebook."""
    games: dict[str, Game] = {}
    problems: list[str] = []
    for manifest_path in sorted(corpus_dir.glob("*/manifest.toml")):
        try:
            manifest = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            problems.append(f"{manifest_path}: cannot read manifest: {exc}")
            continue
        slug = str(manifest.get("slug") or manifest_path.parent.name)
        names = {slug, str(manifest.get("title", ""))}
        names.update(str(a) for a in manifest.get("aliases", []))
        rulebook = manifest_path.parent / str(manifest.get("file", "rulebook.txt"))
        try:
            text = norm(rulebook_text(rulebook))
        except (OSError, IngestError) as exc:
            problems.append(f"{rulebook}: cannot read rulebook: {exc}")
            text = ""
        games[slug] = Game(slug, {n.casefold() for n in names if n}, text)
    if not games:
        problems.append(f"{corpus_dir}: no corpus/<slug>/manifest.toml found")
    return games, problems


def resolve_game(name: str, games: dict[str, Game]) -> Game | None:
    key = name.strip().casefold()
    for game in games.values():
        if key in game.names:
            return game
    return None


def games_named_in(question: str, games: dict[str, Game]) -> list[str]:
    q = question.casefold()
    return [g.slug for g in games.values() if any(n in q for n in g.names)]


def check_probe(item: dict[str, Any], where: str) -> list[str]:
    """Shape of the optional probe fields, and the item's answer passes its own check
    (the one `rules eval` applies to shown conclusions)."""
    problems: list[str] = []
    if "polarity" in item and item["polarity"] not in POLARITIES:
        problems.append(f"{where}: polarity {item['polarity']!r} not in {sorted(POLARITIES)}")
        return problems
    for name in ("right_way", "wrong_way"):
        if name in item and not _check_str_list(item[name], f"{where}: {name}", problems):
            return problems
    probe = {name: item[name] for name in PROBE_FIELDS if name in item}
    lang: Lang = "zh" if item["lang"] == "zh" else "en"
    problems += [
        f"{where}: gold answer {p}" for p in way_round_problems(item["answer"], lang, probe)
    ]
    return problems


def _check_str_list(value: Any, where: str, problems: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) and s.strip() for s in value):
        problems.append(f"{where}: must be a list of non-empty strings")
        return []
    return list(value)


def check_item(item: dict[str, Any], where: str, games: dict[str, Game]) -> list[str]:
    """Return the problems of one gold item (field set and types already checked)."""
    problems: list[str] = []
    if not item["id"].strip():
        problems.append(f"{where}: empty id")
    for key in ("question", "answer"):
        if not item[key].strip():
            problems.append(f"{where}: empty {key}")
    lang, qtype, answerable = item["lang"], item["type"], item["answerable"]
    if lang not in LANGS:
        problems.append(f"{where}: lang {lang!r} not in {sorted(LANGS)}")
    if qtype not in TYPES:
        problems.append(f"{where}: type {qtype!r} not in {sorted(TYPES)}")
    if lang == "zh":
        for key in ("question", "answer"):
            if not _CJK.search(item[key]):
                problems.append(f"{where}: lang zh but {key} has no Chinese characters")
    elif lang == "en":
        for key in ("question", "answer"):
            if _CJK.search(item[key]):
                problems.append(f"{where}: lang en but {key} contains Chinese characters")

    evidence = _check_str_list(item["evidence"], f"{where}: evidence", problems)
    key_facts: list[list[str]] = []
    if not isinstance(item["key_facts"], list):
        problems.append(f"{where}: key_facts must be a list")
    else:
        for i, fact in enumerate(item["key_facts"]):
            key_facts.append(_check_str_list(fact, f"{where}: key_facts[{i}]", problems))
            if isinstance(fact, list) and not fact:
                problems.append(f"{where}: key_facts[{i}] is empty")

    if answerable:
        if qtype == "unanswerable":
            problems.append(f"{where}: answerable item has type 'unanswerable'")
        if not evidence:
            problems.append(f"{where}: answerable item without evidence")
        if not key_facts:
            problems.append(f"{where}: answerable item without key_facts")
        if qtype == "multi_hop" and len(evidence) < 2:
            problems.append(f"{where}: multi_hop item needs evidence from two passages")
        answer = item["answer"].casefold()
        for i, fact in enumerate(key_facts):
            if fact and not any(alt.casefold() in answer for alt in fact):
                problems.append(f"{where}: gold answer does not cover key_facts[{i}] {fact}")
    else:
        if qtype != "unanswerable":
            problems.append(f"{where}: unanswerable item must have type 'unanswerable'")
        if item["evidence"]:
            problems.append(f"{where}: unanswerable item has evidence")
        if item["key_facts"]:
            problems.append(f"{where}: unanswerable item has key_facts")

    game_name = item["game"]
    if game_name is None:
        named = games_named_in(item["question"], games)
        if not named:
            problems.append(f"{where}: game is null but the question names no known game")
        scope = list(games.values())
    else:
        game = resolve_game(game_name, games)
        if game is None:
            problems.append(f"{where}: game {game_name!r} matches no title/slug/alias")
            scope = []
        else:
            scope = [game]
    for ev in evidence:
        needle = norm(ev)
        if len(needle) < MIN_EVIDENCE_CHARS:
            problems.append(f"{where}: evidence too short to be distinctive: {ev!r}")
        if scope and not any(needle in g.text for g in scope):
            target = "any rulebook" if game_name is None else f"rulebook of {scope[0].slug}"
            problems.append(f"{where}: evidence not found in {target}: {ev!r}")
    return problems


def _read_items(gold_path: Path, problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    items: list[tuple[str, dict[str, Any]]] = []
    try:
        lines = gold_path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        problems.append(f"{gold_path}: cannot read: {exc}")
        return items
    for lineno, line in enumerate(lines, start=1):
        where = f"line {lineno}"
        if not line.strip():
            problems.append(f"{where}: blank line")
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: invalid JSON: {exc}")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        items.append((where, obj))
    return items


def validate_gold(gold_path: Path, corpus_dir: Path) -> list[str]:
    """Return a list of human-readable problems with the gold file (empty if valid)."""
    games, problems = load_corpus(corpus_dir)
    seen_ids: dict[str, str] = {}
    for where, obj in _read_items(gold_path, problems):
        if isinstance(obj.get("id"), str):
            where = f"{where} ({obj['id']})"
        missing = [k for k in FIELDS if k not in obj]
        extra = sorted(k for k in obj if k not in FIELDS and k not in OPTIONAL_FIELDS)
        if missing:
            problems.append(f"{where}: missing fields {missing}")
        if extra:
            problems.append(f"{where}: extra fields {extra}")
        wrong = [
            k
            for k, types in (FIELDS | OPTIONAL_FIELDS).items()
            if k in obj and not isinstance(obj[k], types)
        ]
        if wrong:
            problems.append(f"{where}: wrong type for {wrong}")
        if missing or wrong:
            continue
        if obj["id"] in seen_ids:
            problems.append(f"{where}: duplicate id (first at {seen_ids[obj['id']]})")
        else:
            seen_ids[obj["id"]] = where
        problems.extend(check_item(obj, where, games))
        problems.extend(check_probe(obj, where))
    return problems


def summarize(gold_path: Path, corpus_dir: Path) -> str:
    """Counts per game, language, type and answerability."""
    games, _ = load_corpus(corpus_dir)
    items = [obj for _, obj in _read_items(gold_path, [])]
    by_game: Counter[str] = Counter()
    null_game = 0
    for obj in items:
        name = obj.get("game")
        if name is None:
            null_game += 1
            named = games_named_in(str(obj.get("question", "")), games)
            by_game[named[0] if len(named) == 1 else "?"] += 1
        else:
            game = resolve_game(str(name), games)
            by_game[game.slug if game else "?"] += 1
    by_lang = Counter(str(obj.get("lang")) for obj in items)
    by_type = Counter(str(obj.get("type")) for obj in items)
    by_answerable = Counter(str(obj.get("answerable")).lower() for obj in items)
    total = len(items) or 1

    def fmt(counter: Counter[str]) -> str:
        return ", ".join(f"{k}={v} ({v / total:.0%})" for k, v in counter.most_common())

    return "\n".join(
        [
            f"items: {len(items)}",
            f"game: {fmt(by_game)}  [game=null: {null_game}]",
            f"lang: {fmt(by_lang)}",
            f"type: {fmt(by_type)}",
            f"answerable: {fmt(by_answerable)}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gold", type=Path, default=_ROOT / "eval" / "gold" / "gold.jsonl")
    parser.add_argument("--corpus", type=Path, default=_ROOT / "corpus")
    args = parser.parse_args(argv)
    problems = validate_gold(args.gold, args.corpus)
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print(summarize(args.gold, args.corpus))
    print(f"problems: {len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
