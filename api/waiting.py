"""How long a request waited outside the pipeline's own timings: measured by the service
(api.service) as the request goes through the model's line, reported by the schemas."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Waited:
    """A request's time outside the pipeline's own timings: in the model's queue, and
    loading the index or models (nothing once warm; again after the corpus changed)."""

    queue_s: float = 0.0
    load_s: float = 0.0
    # The model's line was full or too slow: the verified rule text alone answered.
    rule_text_only: bool = False
