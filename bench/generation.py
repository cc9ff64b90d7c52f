"""Answer-generation benchmark: time to the rule text, to the conclusion's first token and to
the full answer; conclusion tokens/s; peak memory.

    python bench/generation.py [--model qwen2.5-1.5b-instruct] [--runs 3] [--prompt-lookup N]
                               [--json]

Each question runs through the whole pipeline (retrieval included) with the LLM backend;
the first run also pays for loading the model and is reported apart.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any

from eval.metrics import percentile
from rag.pipeline import Pipeline
from rag.settings import load_settings

QUESTIONS = [
    ("when can't I do a stealth test?", "Maximum Apocalypse"),
    ("什么时候不能进行潜行判定？", "Maximum Apocalypse"),
    ("怪物生成在玩家格，是立刻激活吗？", "Maximum Apocalypse"),
    ("How does DODGE work?", "Suros"),
    ("Can I move diagonally?", "Suros"),
    ("What happens when the Fuel Gauge reaches zero?", "DECK 52"),
]


def _one(pipeline: Pipeline, question: str, game: str) -> dict[str, float]:
    started = time.perf_counter()
    quotes: float | None = None
    first: float | None = None
    tokens = 0
    for event in pipeline.ask_stream(question, game):
        now = time.perf_counter() - started
        if event.kind == "quotes":
            quotes = quotes if quotes is not None else now
        elif event.kind == "token":
            tokens += 1
            first = first if first is not None else now
    total = time.perf_counter() - started
    ttft = first if first is not None else total
    decode_s = max(total - ttft, 1e-9)
    return {
        "quotes_s": quotes if quotes is not None else total,
        "ttft_s": ttft,
        "total_s": total,
        "tokens": tokens,
        "tokens_per_s": tokens / decode_s,
    }


def run(model: str | None, runs: int, prompt_lookup: int | None = None) -> dict[str, Any]:
    base = load_settings()
    update: dict[str, Any] = {"backend": "llama"}
    if model:
        update["model"] = model
    if prompt_lookup is not None:
        update["prompt_lookup"] = prompt_lookup
    generation = base.generation.model_copy(update=update)
    pipeline = Pipeline(base.model_copy(update={"generation": generation}))
    pipeline.ensure_index()
    load_started = time.perf_counter()
    cold = _one(pipeline, *QUESTIONS[0])
    cold["wall_s"] = time.perf_counter() - load_started
    warm = [_one(pipeline, q, g) for _ in range(runs) for q, g in QUESTIONS]

    def summary(key: str) -> dict[str, float]:
        values = [w[key] for w in warm]
        return {
            "p50": round(percentile(values, 50) or 0, 2),
            "p95": round(percentile(values, 95) or 0, 2),
        }

    return {
        "model": pipeline.generator.name,
        "runs": len(warm),
        "prompt_lookup": generation.prompt_lookup,
        "cold_first_answer_s": round(cold["wall_s"], 2),
        "quotes_s": summary("quotes_s"),
        "ttft_s": summary("ttft_s"),
        "total_s": summary("total_s"),
        "tokens_per_s": summary("tokens_per_s"),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "targets": {"ttft_s": 3.0, "total_s": 15.0},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Answer-generation latency benchmark.")
    parser.add_argument("--model", default=None, help="LLM name or .gguf path.")
    parser.add_argument("--runs", type=int, default=2, help="Passes over the questions.")
    parser.add_argument(
        "--prompt-lookup", type=int, default=None, help="Prompt lookup draft tokens (0: off)."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run(args.model, args.runs, args.prompt_lookup)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:<22}{value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
