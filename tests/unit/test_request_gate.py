"""The request gate's header rules and ``serve``'s host and access-log settings."""

from __future__ import annotations

import logging

import pytest

from retrieval_pipeline.auth import is_json_media_type, request_host
from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.serve import AccessLogWithoutQuery
from retrieval_pipeline.settings import ALLOWED_HOSTS_ENV, LOOPBACK_HOSTS, allowed_hosts


@pytest.mark.parametrize(
    ("value", "host"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("[::1]:8000", "::1"),
        ("[::1]", "::1"),
        ("example.com.", "example.com"),
        ("rebind.example:80", "rebind.example"),
        (None, ""),
    ],
)
def test_request_host_is_the_name_without_port(value: str | None, host: str) -> None:
    headers = [] if value is None else [(b"host", value.encode())]
    assert request_host(headers) == host


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/vnd.api+json", True),
        ("text/plain", False),
        ("text/json", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("application/jsonp", False),
        ("", False),
        (None, False),
    ],
)
def test_only_json_media_types_count_as_json(
    content_type: str | None, json: bool
) -> None:
    assert is_json_media_type(content_type) is json


def test_a_server_without_keys_answers_loopback_and_the_listed_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ALLOWED_HOSTS_ENV, raising=False)
    assert allowed_hosts(keyed=False) == LOOPBACK_HOSTS
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, " Dev.Box , [fe80::1] ,")
    assert allowed_hosts(keyed=False) == LOOPBACK_HOSTS | {"dev.box", "fe80::1"}
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, "*")
    with pytest.raises(ConfigurationError, match="needs API keys"):
        allowed_hosts(keyed=False)


def test_a_keyed_server_answers_any_host_unless_names_are_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ALLOWED_HOSTS_ENV, raising=False)
    assert allowed_hosts(keyed=True) is None
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, "*")
    assert allowed_hosts(keyed=True) is None
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, "api.example.com")
    assert allowed_hosts(keyed=True) == {"api.example.com"}  # loopback not implied


def _access_record(path: str) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "POST", path, "1.1", 401),
        None,
    )


def test_the_access_log_drops_query_strings_and_keeps_the_line() -> None:
    record = _access_record("/retrieve/invoke?api_key=ks-secret-1&x=2")
    assert AccessLogWithoutQuery().filter(record) is True
    line = record.getMessage()
    assert "ks-secret-1" not in line
    assert line == '127.0.0.1:5000 - "POST /retrieve/invoke?... HTTP/1.1" 401'
    plain = _access_record("/healthz")
    AccessLogWithoutQuery().filter(plain)
    assert plain.getMessage() == '127.0.0.1:5000 - "POST /healthz HTTP/1.1" 401'
