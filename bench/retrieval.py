"""Retrieval benchmark: BM25, dense, hybrid (and hybrid+rerank) side by side on a gold set.

Reports hit@1, hit@5 and MRR per gold set, mode and language, the median and p95 retrieval
latency per mode (models loaded, index warm), the index build time and the peak memory.

    python bench/retrieval.py [--gold FILE ...] [--book PDF=TITLE ...] [--rerank] [--limit N]
                              [--json]

The index is built afresh into a temporary HOME so the build time is real; the models
come from the usual models folder. Books given with --book are added there first with
`rules add`'s code; by default the real publishers' rulebooks in ../shared/real-rulebooks,
when present, with their gold set reported apart from the built-in books'.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eval import DEFAULT_GOLD, GOLD_DIR
from eval.metrics import first_hit_rank, hit_at, mean, percentile, reciprocal_rank, share
from eval.runner import GoldItem, gold_set_parser, load_gold
from rag.pipeline import Pipeline
from rag.reading.corpus import Corpus
from rag.searching.retrieval import Mode, Retriever
from rag.settings import load_settings

MODES: tuple[Mode, ...] = ("bm25", "dense", "hybrid")
REAL_RULEBOOKS = Path(__file__).resolve().parents[2] / "shared" / "real-rulebooks"
REAL_BOOKS = {"time-bomb.pdf": "Time Bomb", "bangkok.pdf": "Bangkok"}
REAL_GOLD = GOLD_DIR / "real-rulebooks.jsonl"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _scores(ranks: list[int | None]) -> dict[str, float | None]:
    return {
        "hit@1": share([hit_at(r, 1) for r in ranks]),
        "hit@5": share([hit_at(r, 5) for r in ranks]),
        "mrr": mean([reciprocal_rank(r) for r in ranks]),
    }


def _run_mode(
    pipeline: Pipeline, retriever: Retriever, items: list[GoldItem], mode: str
) -> dict[str, Any]:
    ranks: dict[str, list[int | None]] = {"en": [], "zh": []}
    latencies: list[float] = []
    reranker = pipeline.reranker if mode == "hybrid+rerank" else None
    search_mode: Mode = "hybrid" if mode == "hybrid+rerank" else mode  # type: ignore[assignment]
    for item in items:
        game = pipeline.resolve_game(item.game, item.question)
        query = Corpus.without_names(item.question, game)  # as Pipeline.retrieve searches
        started = time.perf_counter()
        hits = retriever.search(query, game.slug, 5, mode=search_mode, reranker=reranker)
        latencies.append(time.perf_counter() - started)
        ranks[item.lang].append(first_hit_rank([h.chunk.text for h in hits], item.evidence))
    return {
        "all": _scores(ranks["en"] + ranks["zh"]),
        "en": _scores(ranks["en"]),
        "zh": _scores(ranks["zh"]),
        "latency_ms": {
            "p50": round((percentile(latencies, 50) or 0) * 1000, 2),
            "p95": round((percentile(latencies, 95) or 0) * 1000, 2),
        },
    }


def run(
    golds: list[Path], books: dict[Path, str], *, rerank: bool, limit: int | None
) -> dict[str, Any]:
    gold_items = {gold: [i for i in load_gold(gold) if i.answerable][:limit] for gold in golds}
    with tempfile.TemporaryDirectory() as home:
        base = load_settings()
        settings = base.model_copy(
            update={
                "home": Path(home),
                "models_dir": base.model_dir,
                "retrieval": base.retrieval.model_copy(update={"rerank": rerank}),
            }
        )
        pipeline = Pipeline(settings)
        started = time.perf_counter()
        retriever = pipeline.ensure_index(rebuild=True)
        build_s = time.perf_counter() - started
        add_s = {}
        for path, title in books.items():
            started = time.perf_counter()
            pipeline.add_book(path, title)
            add_s[title] = round(time.perf_counter() - started, 2)
        retriever = pipeline.ensure_index()
        # Load lazily held parts before timing: every game's BM25 table, jieba's dictionary
        # (a mixed query tokenizes Chinese), the embedder.
        for slug in pipeline.corpus.slugs:
            retriever.lexical("warm up 预热", slug, 1)
        retriever.dense("warm up", pipeline.corpus.slugs[0], 1)
        modes = [*MODES, "hybrid+rerank"] if rerank else list(MODES)
        return {
            "golds": {
                str(gold): {
                    "items": len(items),
                    "modes": {m: _run_mode(pipeline, retriever, items, m) for m in modes},
                }
                for gold, items in gold_items.items()
            },
            "embedding_model": pipeline.embedder.name,
            "chunks": len(retriever.index.chunks),
            "index_type": retriever.index.manifest.get("index_type"),
            "index_build_s": round(build_s, 2),
            "add_s": add_s,
            "peak_rss_mb": round(_peak_rss_mb(), 1),
        }


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def render(report: dict[str, Any]) -> str:
    added = ", ".join(f"{title} {seconds} s" for title, seconds in report["add_s"].items())
    lines = [
        f"embedder {report['embedding_model']}; {report['chunks']} chunks "
        f"({report['index_type']}); index build {report['index_build_s']} s"
        + (f"; added {added}" if added else "")
        + f"; peak RSS {report['peak_rss_mb']} MB",
    ]
    for gold, result in report["golds"].items():
        lines += [
            "",
            f"gold {gold}: {result['items']} answerable items",
            f"{'mode':<15}{'lang':<5}{'hit@1':>8}{'hit@5':>8}{'MRR':>8}{'p50 ms':>9}{'p95 ms':>9}",
        ]
        for mode, scores in result["modes"].items():
            for lang in ("all", "en", "zh"):
                s = scores[lang]
                latency = scores["latency_ms"] if lang == "all" else {"p50": "", "p95": ""}
                lines.append(
                    f"{mode:<15}{lang:<5}{_fmt(s['hit@1']):>8}{_fmt(s['hit@5']):>8}"
                    f"{_fmt(s['mrr']):>8}{latency['p50']!s:>9}{latency['p95']!s:>9}"
                )
    return "\n".join(lines)


def _book(value: str) -> tuple[Path, str]:
    path, sep, title = value.partition("=")
    if not sep or not title:
        raise argparse.ArgumentTypeError(f"{value!r}: give a book as FILE=TITLE")
    return Path(path), title


def main() -> int:
    parser = gold_set_parser(__doc__, json_help="Print the report as JSON.")
    parser.add_argument("--book", type=_book, action="append", help="FILE=TITLE to add first.")
    parser.add_argument("--rerank", action="store_true", help="Also run hybrid + LLM rerank.")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N items.")
    args = parser.parse_args()
    real = {REAL_RULEBOOKS / name: title for name, title in REAL_BOOKS.items()}
    if args.book is not None:
        books = dict(args.book)
    else:
        books = real if all(path.exists() for path in real) else {}
    golds = args.gold or [DEFAULT_GOLD, *([REAL_GOLD] if books == real else [])]
    report = run(golds, books, rerank=args.rerank, limit=args.limit)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
