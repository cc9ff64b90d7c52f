"""The evaluation harness: gold Q&A files run through the pipeline, scored and compared.

Only paths live here: the CLI imports this package to register `rules eval`, and
`rules --help` must not wait for the pipeline's imports.
"""

from pathlib import Path

EVAL_DIR = Path(__file__).resolve().parent
GOLD_DIR = EVAL_DIR / "gold"
DEFAULT_GOLD = GOLD_DIR / "gold.jsonl"
DEFAULT_CONFIGS = EVAL_DIR / "configs" / "compare.toml"
