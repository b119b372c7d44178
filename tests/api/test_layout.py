"""app.py only assembles the app: every route, the authorizer and the notifier come from
a blueprint of chalicelib/api/, each route under the one error mapping."""

from __future__ import annotations

import inspect

import app as app_module
from chalicelib.api import responses
from tests.support import ROOT

# Routes that answer without the error mapping: nothing in them can fail.
UNWRAPPED = {"favicon"}


def test_app_py_registers_and_defines_nothing() -> None:
    source = (ROOT / "app.py").read_text()

    assert len(source.splitlines()) < 200
    assert "def " not in source
    assert "@app." not in source


def test_every_entry_point_lives_in_chalicelib_api() -> None:
    app = app_module.app
    views = [entry for methods in app.routes.values() for entry in methods.values()]
    handlers = [auth.handler_string for auth in app.builtin_auth_handlers]
    handlers += [source.handler_string for source in app.event_sources]

    assert {inspect.unwrap(v.view_function).__module__ for v in views} <= {
        f"chalicelib.api.{path.stem}" for path in (ROOT / "chalicelib" / "api").glob("*.py")
    }
    assert handlers == ["chalicelib.api.authorizer.bearer", "chalicelib.api.notifier.notifier"]


def test_every_route_but_the_icon_maps_its_errors_in_the_one_place() -> None:
    wrapper = f"{responses.handled.__qualname__}.<locals>.wrapper"
    for methods in app_module.app.routes.values():
        for entry in methods.values():
            if entry.view_name in UNWRAPPED:
                continue
            # functools.wraps gives the wrapper the view's name; its code keeps its own.
            assert entry.view_function.__code__.co_qualname == wrapper, entry.view_name
