"""The reference pages in docs/ generated from the code, so that they cannot drift from it:
docs/configuration.md from the settings model, and the second half of docs/api.md (endpoints,
status codes, schemas, examples) from the API's OpenAPI document; the first half is written
by hand.

    python -m cli.reference          # rewrite them
    python -m cli.reference --check  # exit 1, naming them, when one is out of date
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fastapi.openapi.utils import validation_error_definition, validation_error_response_definition

from cli.settings_view import settings_reference
from rag.settings import PROJECT_ROOT, ApiSettings, Settings

DOCS = PROJECT_ROOT / "docs"
CONFIGURATION_PAGE = DOCS / "configuration.md"
API_PAGE = DOCS / "api.md"
REGENERATE = "python -m cli.reference"
# docs/api.md from this line on is generated; above it, written by hand.
API_START = f"<!-- Generated from the OpenAPI document by `{REGENERATE}`: not edited by hand. -->"

# FastAPI's own validation-error schemas: this API answers a 422 in its own error shape.
_FASTAPI_SCHEMAS = {
    validation_error_definition["title"],
    validation_error_response_definition["title"],
}
_BOUNDS = (
    ("minLength", "length ≥"),
    ("maxLength", "length ≤"),
    ("minItems", "items ≥"),
    ("maxItems", "items ≤"),
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("pattern", "matching"),
)


def openapi_spec() -> dict[str, Any]:
    """The API's OpenAPI document as a server with keys publishes it (the key security and
    its 401 and 403 declared), built without loading any model or reading any setting."""
    from api.app import create_app  # FastAPI's app and routes: only when a page is made

    settings = Settings.model_construct(api=ApiSettings(api_keys=["sk_reference"]))
    return create_app(settings).openapi()


def api_reference(spec: dict[str, Any]) -> str:
    """Markdown: the endpoints at a glance, then each one, the status codes and the schemas."""
    operations = [
        (method.upper(), path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    ]
    lines = [
        "## Endpoints",
        "",
        "| endpoint | what it does | request | response | other statuses |",
        "|---|---|---|---|---|",
    ]
    for method, path, operation in operations:
        request = _request_schema(operation)
        response, _ = _success(operation)
        errors = ", ".join(sorted(_errors(operation)))
        lines.append(
            f"| `{method} {path}` | {_cell(operation.get('summary', ''))} | {request} "
            f"| {response} | {errors} |"
        )
    lines.append("")
    for method, path, operation in operations:
        lines += _operation(method, path, operation)
    lines += _status_codes(operations)
    lines += ["## Schemas", ""]
    schemas = spec["components"]["schemas"]
    for name in sorted(schemas):
        if name not in _FASTAPI_SCHEMAS:
            lines += _schema(name, schemas[name])
    return "\n".join(lines).rstrip() + "\n"


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"### `{method} {path}`", "", operation.get("summary", "") + "."]
    if operation.get("description"):
        lines += ["", operation["description"]]
    lines.append("")
    if operation.get("security"):
        lines += ["Needs an API key when the server has keys (`X-API-Key` or Bearer).", ""]
    for parameter in operation.get("parameters", []):
        required = ", required" if parameter.get("required") else ""
        kind = _type(parameter.get("schema", {}))
        lines.append(
            f"- `{parameter['name']}` ({parameter['in']}, {kind}{required}): "
            f"{parameter.get('description', '')}".rstrip(": ")
        )
    if operation.get("parameters"):
        lines.append("")
    request = _request_schema(operation)
    if request:
        lines += [f"Request body: {request}.", ""]
    response, content = _success(operation)
    lines += [f"Response: {response}.", ""]
    for media, body in content.items():
        if "example" in body:
            language = "json" if media == "application/json" else "text"
            example = body["example"]
            text = example if isinstance(example, str) else _json(example)
            lines += ["Example:", "", f"```{language}", text.rstrip("\n"), "```", ""]
    return lines


def _request_schema(operation: dict[str, Any]) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    return " or ".join(_type(body.get("schema", {})) for body in content.values())


def _success(operation: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a 2xx response carries, as text for a table, and its content by media type."""
    for status, response in operation["responses"].items():
        if status.startswith("2"):
            content = response.get("content", {})
            kinds = []
            for media, body in content.items():
                schema = body.get("schema", {})
                shown = _type(schema) if "$ref" in schema else ""
                kinds.append(shown if media == "application/json" and shown else f"`{media}`")
            return " or ".join(kinds) or "empty", content
    return "empty", {}


def _errors(operation: dict[str, Any]) -> list[str]:
    return [status for status in operation["responses"] if not status.startswith("2")]


def _status_codes(operations: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """Each error status with every meaning the endpoints give it (FastAPI's own 422 aside:
    this API answers it in its own error shape, described where a route declares it)."""
    described: dict[str, list[str]] = {}
    for _, _, operation in operations:
        for status in _errors(operation):
            response = operation["responses"][status]
            meanings = described.setdefault(status, [])
            if not _fastapi_own(response) and response.get("description") not in meanings:
                meanings.append(response.get("description", ""))
    lines = ["## Status codes", "", "| status | meaning |", "|---|---|"]
    lines += [
        f"| {status} | {_cell(' '.join(described[status]))} |" for status in sorted(described)
    ]
    return [*lines, ""]


def _fastapi_own(response: dict[str, Any]) -> bool:
    refs = [body.get("schema", {}).get("$ref", "") for body in response.get("content", {}).values()]
    return any(ref.rsplit("/", 1)[-1] in _FASTAPI_SCHEMAS for ref in refs)


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        lines += ["| field | type | description |", "|---|---|---|"]
        for field, inner in properties.items():
            kind = _type(inner) + (", required" if field in required else "")
            if "default" in inner and inner["default"] is not None:
                kind += f", default `{json.dumps(inner['default'], ensure_ascii=False)}`"
            lines.append(f"| `{field}` | {_cell(kind)} | {_cell(inner.get('description', ''))} |")
        lines.append("")
    for example in schema.get("examples", []):
        lines += ["Example:", "", "```json", _json(example), "```", ""]
    return lines


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema as a reader says it: `string, length ≤ 200`, `list of [Quote](#quote)`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        nullable = any(s.get("type") == "null" for s in schema["anyOf"])
        return " or ".join(kinds) + (" or null" if nullable else "")
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    if schema.get("type") == "array":
        kind = f"list of {_type(schema.get('items', {}))}"
    else:
        kind = schema.get("type", "any")
    bounds = [f"{sign} {_number(schema[key])}" for key, sign in _BOUNDS if key in schema]
    return ", ".join([kind, *bounds])


def _number(value: Any) -> Any:
    """1.0 as 1: JSON schema writes an integer's bounds as floats."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def pages() -> dict[Path, str]:
    """Each generated page and the text it should have now. api.md keeps its hand-written
    part, above the generated one."""
    written = API_PAGE.read_text(encoding="utf-8") if API_PAGE.exists() else ""
    head = written.partition(API_START)[0].rstrip("\n")
    api_page = f"{head}\n\n{API_START}\n\n{api_reference(openapi_spec())}"
    return {CONFIGURATION_PAGE: settings_reference(), API_PAGE: api_page.lstrip("\n")}


def stale_pages() -> list[Path]:
    """The generated pages whose text differs from what the code gives now."""
    return [
        path
        for path, text in pages().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=REGENERATE, description="Rewrite the reference pages docs/ generates from the code."
    )
    parser.add_argument(
        "--check", action="store_true", help="Write nothing; exit 1 if a page is out of date."
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for path in stale:
            print(f"{path.relative_to(PROJECT_ROOT)} is out of date: run `{REGENERATE}`")
        return 1 if stale else 0
    DOCS.mkdir(exist_ok=True)
    for path, text in pages().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
