"""Exit codes scripts rely on: every HTTP status class, transport failures and usage."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from admin_cli.api_client import is_plain_http_to_remote
from tests.cli.conftest import Cli
from tests.cli.fake_api import FakeAdminApi, error, running_fake, session_view
from tests.support import free_port


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, 2),
        (413, 2),
        (401, 4),
        (403, 4),
        (404, 3),
        (409, 5),
        (429, 6),
        (500, 6),
        (503, 6),
        (418, 1),
    ],
)
def test_http_status_maps_to_exit_code_and_message_goes_to_stderr(
    cli: Cli, api: FakeAdminApi, status: int, code: int
) -> None:
    message = f"Server says {status}."
    api.reply("GET", "/v1/grants", status, error("some_code", message))

    run = cli.admin(api, "grant", "list")

    assert run.code == code
    assert run.out == ""
    assert run.err.strip() == f"mcp-quota: error: {message}"


def test_json_mode_prints_nothing_on_stdout_for_an_error(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/grants", 403, error("forbidden", "Admin role required."))

    run = cli.admin(api, "grant", "list", "--json")

    assert (run.code, run.out) == (4, "")
    assert "Admin role required." in run.err


def test_non_json_error_body_is_reported_with_its_status(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/grants", 502, b"<html>Bad Gateway</html>")

    run = cli.admin(api, "grant", "list")

    assert run.code == 6
    assert "HTTP 502: <html>Bad Gateway</html>" in run.err


def test_non_json_success_body_exits_1(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/grants", 200, b"not json")

    run = cli.admin(api, "grant", "list")

    assert run.code == 1
    assert "not JSON" in run.err


def test_connection_refused_exits_6(cli: Cli) -> None:
    url = f"http://127.0.0.1:{free_port()}"

    run = cli("grant", "list", "--url", url, "--token", "t")

    assert run.code == 6
    assert f"Could not reach the quota service at {url}" in run.err


@pytest.fixture
def stalled_api() -> Iterator[FakeAdminApi]:
    release = threading.Event()
    with running_fake() as api:
        api.reply("GET", "/v1/grants", 200, {"grants": []}, hold=release)
        yield api
        release.set()


def test_timeout_exits_6(cli: Cli, stalled_api: FakeAdminApi) -> None:
    run = cli.admin(stalled_api, "grant", "list", "--timeout", "0.2")

    assert run.code == 6
    assert "Could not reach" in run.err


def test_redirects_are_not_followed_so_the_token_stays_put(cli: Cli, api: FakeAdminApi) -> None:
    with running_fake() as elsewhere:
        elsewhere.reply("GET", "/v1/grants", 200, {"grants": []})
        target = f"{elsewhere.url}/v1/grants"
        api.reply("GET", "/v1/grants", 307, b"", headers={"Location": target})

        run = cli.admin(api, "grant", "list")

        assert run.code == 1
        assert target in run.err
        assert elsewhere.requests == []


@pytest.mark.parametrize("url", ["ftp://example.com", "127.0.0.1:8000", "http://"])
def test_malformed_url_exits_2(cli: Cli, url: str) -> None:
    run = cli("grant", "list", "--url", url, "--token", "t")

    assert run.code == 2
    assert "http://" in run.err


def test_plain_http_to_a_remote_host_warns(cli: Cli, api: FakeAdminApi) -> None:
    assert not is_plain_http_to_remote("https://quota.example.com")
    api.reply("GET", "/v1/grants", 200, {"grants": []})

    remote = cli("grant", "list", "--url", "http://192.0.2.1:9", "--token", "t", "--timeout", "0.2")
    local = cli.admin(api, "grant", "list")

    assert "warning: sending the admin token unencrypted to http://192.0.2.1:9" in remote.err
    assert remote.code == 6
    assert local.err == ""


def test_help_exits_0_and_lists_commands(cli: Cli) -> None:
    run = cli("--help")

    assert run.code == 0
    for command in ("token", "session", "grant", "audit"):
        assert command in run.out
    assert "Exit codes" in run.out


@pytest.mark.parametrize(
    "argv",
    [[], ["session"], ["session", "frobnicate", "x"], ["grant", "add"], ["audit", "--limit", "0"]],
)
def test_usage_errors_exit_2(cli: Cli, argv: list[str]) -> None:
    run = cli(*argv)

    assert run.code == 2
    assert "usage:" in run.err


def test_an_unexpected_fault_exits_1_with_a_message_not_a_traceback(
    cli: Cli, api: FakeAdminApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_: object) -> str:
        raise RuntimeError("renderer broke")

    monkeypatch.setattr("admin_cli.render.session_view", explode)
    api.reply("GET", "/v1/sessions/s", 200, session_view("s"))

    run = cli.admin(api, "session", "show", "s")

    assert run.code == 1
    assert run.err.strip() == "mcp-quota: unexpected error: RuntimeError: renderer broke"
    assert "Traceback" not in run.err


@pytest.mark.parametrize(
    ("status", "body", "expected", "code"),
    [
        (401, {"message": "Unauthorized"}, "Unauthorized (HTTP 401): no token reached", 4),
        (
            403,
            {"Message": "User is not authorized"},
            "(HTTP 403): the token is unknown, revoked",
            4,
        ),
        (405, {"message": "Method not allowed"}, "Method not allowed (HTTP 405).", 1),
    ],
)
def test_gateway_shaped_errors_are_explained(
    cli: Cli, api: FakeAdminApi, status: int, body: dict[str, str], expected: str, code: int
) -> None:
    api.reply("GET", "/v1/grants", status, body)

    run = cli.admin(api, "grant", "list")

    assert run.code == code
    assert expected in run.err
