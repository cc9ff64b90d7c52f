"""Keys that fit a public page, over a live server: publishable keys bound to their pages'
origins, secret keys for servers, rate limits per visitor (behind a trusted proxy) and per
key, the OpenAPI spec's security, and /demo with keys on."""

from __future__ import annotations

import re
from ipaddress import ip_network
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers
from test_api import error_of

from api.security import visitor_address
from rag.pipeline import Pipeline

SHOP = "https://shop.example"
PUBLISHABLE = {"key": "pk_shop", "origins": [SHOP]}


def from_page(origin: str | None = SHOP, key: str = "pk_shop", **headers: str) -> dict[str, str]:
    return {"X-API-Key": key, **({"Origin": origin} if origin else {}), **headers}


def test_a_publishable_key_works_only_from_its_pages(serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(pipeline, publishable_keys=[PUBLISHABLE], api_keys=["sk_server"])
    with httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/v1/games", headers=from_page())
        assert page.status_code == 200
        assert page.headers["access-control-allow-origin"] == SHOP  # CORS lets its pages in
        assert client.get("/v1/games", headers=from_page("HTTPS://Shop.Example")).is_success
        referred = from_page(None, Referer=f"{SHOP}/rules?x=1")  # a same-origin GET
        assert client.get("/v1/games", headers=referred).is_success
        for copied in (from_page("https://evil.example"), from_page(None), from_page("null")):
            error = error_of(client.get("/v1/games", headers=copied), 403, "origin_not_allowed")
            assert "secret key" in error["message"]
        # A server with its secret key needs no page.
        assert client.get("/v1/games", headers={"X-API-Key": "sk_server"}).is_success
        error_of(client.get("/v1/games", headers=from_page(key="pk_other")), 401, "unauthorized")


def test_visitors_are_limited_one_by_one_behind_a_trusted_proxy(
    serve_api: Any, pipeline: Pipeline
) -> None:
    url = serve_api(
        pipeline, rate_limit_per_minute=2, publishable_keys=[PUBLISHABLE],
        trusted_proxies=["127.0.0.1"],
    )  # fmt: skip

    def get(forwarded: str) -> httpx.Response:
        return httpx.get(f"{url}/v1/games", headers=from_page(**{"X-Forwarded-For": forwarded}))

    assert get("203.0.113.1").is_success and get("203.0.113.1").is_success
    limited = error_of(get("203.0.113.1"), 429, "rate_limited")
    assert "per visitor" in limited["message"]
    assert get("203.0.113.2").is_success  # another visitor, another bucket
    # A client's own claim before the proxy's entry is not believed: the proxy saw .1.
    error_of(get("198.51.100.9, 203.0.113.1"), 429)


def test_the_proxy_header_is_ignored_from_untrusted_peers(
    serve_api: Any, pipeline: Pipeline
) -> None:
    url = serve_api(pipeline, rate_limit_per_minute=2)
    for n in range(2):
        headers = {"X-Forwarded-For": f"203.0.113.{n}"}
        assert httpx.get(f"{url}/v1/games", headers=headers).is_success
    spoofed = httpx.get(f"{url}/v1/games", headers={"X-Forwarded-For": "203.0.113.99"})
    error_of(spoofed, 429, "rate_limited")


def test_a_key_is_limited_for_all_its_visitors_together(serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(
        pipeline, rate_limit_per_minute=100, key_rate_limit_per_minute=3,
        publishable_keys=[PUBLISHABLE, {"key": "pk_blog", "origins": ["https://blog.example"]}],
        trusted_proxies=["127.0.0.0/8"],
    )  # fmt: skip

    def get(visitor: int, key: str = "pk_shop", origin: str = SHOP) -> httpx.Response:
        headers = from_page(origin, key, **{"X-Forwarded-For": f"203.0.113.{visitor}"})
        return httpx.get(f"{url}/v1/games", headers=headers)

    assert all(get(visitor).is_success for visitor in range(3))
    error = error_of(get(3), 429, "rate_limited")
    assert "this key" in error["message"]
    assert get(4, "pk_blog", "https://blog.example").is_success  # its own quota


def test_the_spec_declares_security_only_with_keys(serve_api: Any, pipeline: Pipeline) -> None:
    def spec(url: str) -> dict[str, Any]:
        return dict(httpx.get(f"{url}/openapi.json").json())

    open_spec = spec(serve_api(pipeline))
    assert "securitySchemes" not in open_spec.get("components", {})
    ask = open_spec["paths"]["/v1/ask"]["post"]
    assert "security" not in ask and "401" not in ask["responses"]
    keyed = spec(serve_api(pipeline, api_keys=["k"]))
    assert set(keyed["components"]["securitySchemes"]) == {"APIKeyHeader", "HTTPBearer"}
    ask = keyed["paths"]["/v1/ask"]["post"]
    assert ask["security"] and {"401", "403"} <= set(ask["responses"])


def test_the_demo_has_its_own_key_for_its_own_pages(serve_api: Any, pipeline: Pipeline) -> None:
    url = serve_api(pipeline, publishable_keys=[PUBLISHABLE])
    with httpx.Client(base_url=url, timeout=30) as client:
        found = re.search(r'data-api-key="(pk_demo_\w+)"', client.get("/demo").text)
        assert found is not None
        key = found[1]
        own = {"X-API-Key": key, "Referer": f"{url}/demo"}
        assert client.get("/v1/games", headers=own).is_success
        body = {"question": "How much HP does each player start with in Suros?"}
        asked = client.post("/v1/ask", json=body, headers={**own, "Origin": url})
        assert asked.is_success
        for elsewhere in ({"Origin": SHOP}, {}):
            headers = {"X-API-Key": key, **elsewhere}
            error_of(client.get("/v1/games", headers=headers), 403, "origin_not_allowed")
    # Another worker (same settings) serves the same key; other keys, another key.
    again = httpx.get(f"{serve_api(pipeline, publishable_keys=[PUBLISHABLE])}/demo").text
    assert key in again
    other = httpx.get(f"{serve_api(pipeline, api_keys=['x'])}/demo").text
    assert key not in other
    plain = httpx.get(f"{serve_api(pipeline)}/demo").text  # keys off: no key to show
    assert "data-api-key" not in plain
    off = serve_api(pipeline, publishable_keys=[PUBLISHABLE], demo_key=False)
    assert "data-api-key" not in httpx.get(f"{off}/demo").text


@pytest.mark.parametrize(
    ("peer", "forwarded", "visitor"),
    [
        ("198.51.100.1", ["203.0.113.1"], "198.51.100.1"),  # not a proxy: the header is a claim
        ("10.0.0.2", ["203.0.113.1"], "203.0.113.1"),
        ("10.0.0.2", ["1.1.1.1, 203.0.113.1, 10.0.0.3"], "203.0.113.1"),  # two proxies
        ("10.0.0.2", ["1.1.1.1", "203.0.113.1"], "203.0.113.1"),  # the header twice
        ("10.0.0.2", [], "10.0.0.2"),
        ("10.0.0.2", ["10.0.0.5"], "10.0.0.5"),  # only proxies: the first one named
        ("10.0.0.2", ["not-an-ip"], "not-an-ip"),
    ],
)
def test_visitor_address(peer: str, forwarded: list[str], visitor: str) -> None:
    headers = Headers(raw=[(b"x-forwarded-for", line.encode()) for line in forwarded])
    trusted = [ip_network("10.0.0.0/8")]
    assert visitor_address(peer, headers, trusted, "X-Forwarded-For") == visitor
