"""Retrieval benchmark: BM25, dense, hybrid (and hybrid+rerank) side by side on a gold set.

Reports hit@1, hit@5 and MRR per mode and language, the median and p95 retrieval latency
per mode (models loaded, index warm), the index build time and the peak memory.

    python bench/retrieval.py [--gold eval/gold/gold.jsonl] [--rerank] [--limit N] [--json]

The index is built afresh into a temporary HOME so the build time is real; the models
come from the usual models folder.
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

from eval import DEFAULT_GOLD
from eval.runner import GoldItem, load_gold
from rag.metrics import first_hit_rank, hit_at, mean, percentile, reciprocal_rank, share
from rag.pipeline import Pipeline
from rag.searching.retrieval import Mode, Retriever
from rag.settings import load_settings

MODES: tuple[Mode, ...] = ("bm25", "dense", "hybrid")


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
        slug = pipeline.resolve_game(item.game, item.question).slug
        started = time.perf_counter()
        hits = retriever.search(item.question, slug, 5, mode=search_mode, reranker=reranker)
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


def run(gold: Path, *, rerank: bool, limit: int | None) -> dict[str, Any]:
    items = [i for i in load_gold(gold) if i.answerable][:limit]
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
        # Load lazily held parts before timing: every game's BM25 table, jieba's dictionary
        # (a mixed query tokenizes Chinese), the embedder.
        for slug in pipeline.corpus.slugs:
            retriever.lexical("warm up 预热", slug, 1)
        retriever.dense("warm up", pipeline.corpus.slugs[0], 1)
        modes = [*MODES, "hybrid+rerank"] if rerank else list(MODES)
        results = {mode: _run_mode(pipeline, retriever, items, mode) for mode in modes}
        return {
            "gold": str(gold),
            "items": len(items),
            "embedding_model": pipeline.embedder.name,
            "chunks": len(retriever.index.chunks),
            "index_type": retriever.index.manifest.get("index_type"),
            "index_build_s": round(build_s, 2),
            "peak_rss_mb": round(_peak_rss_mb(), 1),
            "modes": results,
        }


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def render(report: dict[str, Any]) -> str:
    lines = [
        f"gold {report['gold']}: {report['items']} answerable items; "
        f"embedder {report['embedding_model']}; {report['chunks']} chunks "
        f"({report['index_type']}); index build {report['index_build_s']} s; "
        f"peak RSS {report['peak_rss_mb']} MB",
        "",
        f"{'mode':<15}{'lang':<5}{'hit@1':>8}{'hit@5':>8}{'MRR':>8}{'p50 ms':>9}{'p95 ms':>9}",
    ]
    for mode, result in report["modes"].items():
        for lang in ("all", "en", "zh"):
            s = result[lang]
            latency = result["latency_ms"] if lang == "all" else {"p50": "", "p95": ""}
            lines.append(
                f"{mode:<15}{lang:<5}{_fmt(s['hit@1']):>8}{_fmt(s['hit@5']):>8}"
                f"{_fmt(s['mrr']):>8}{latency['p50']!s:>9}{latency['p95']!s:>9}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gold", type=Path, default=DEFAULT_GOLD)
    parser.add_argument("--rerank", action="store_true", help="Also run hybrid + LLM rerank.")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N items.")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    args = parser.parse_args()
    report = run(args.gold, rerank=args.rerank, limit=args.limit)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
