"""Property-based requests generated from the OpenAPI document: no server error, and every
response as documented (status, content type, schema, auth)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from rag.pipeline import Pipeline

KEY = "test-key"

# schemathesis' pytest plugin does not support this pytest; drive Hypothesis directly.


@pytest.mark.slow
def test_no_request_makes_a_server_error(serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(pipeline, api_keys=[KEY])
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 15

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=30,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def conforms(case: Any) -> None:
            # Not positive_data_acceptance: some limits are the server's settings, not the
            # schema's (max_question_chars), and a game named in a request may be unknown.
            case.call_and_validate(
                headers={"X-API-Key": KEY}, excluded_checks=[positive_data_acceptance]
            )

        conforms()
