"""The rest of chalicelib as the modules of chalicelib/api/ name it: each name a stand-in
that imports its module on the first attribute read (`chalicelib.lazy`).

Every module here is imported in the Lambda init phase, so none imports the rest of the
package itself: it imports its names from this module, which imports nothing but
`chalicelib.lazy` (tests/api/test_lazy_imports.py). The type checker sees the real
modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalicelib.lazy import lazy_module

if TYPE_CHECKING:
    from chalicelib import aws, clock, console_files, errors, notify, wiring
    from chalicelib.admin import requests as admin_requests
    from chalicelib.api import lambda_hold, responses
    from chalicelib.auth import authorizer as auth
    from chalicelib.auth import roles, tokens
    from chalicelib.check import afterwards, binding, deadline, shadow
    from chalicelib.check import approvals as approval_rules
    from chalicelib.check import requests as validation
    from chalicelib.check import results as kept_results
    from chalicelib.links import pages
    from chalicelib.quota import answers
    from chalicelib.quota import core as quota
    from chalicelib.storage import ports
else:
    admin_requests = lazy_module("chalicelib.admin.requests")
    afterwards = lazy_module("chalicelib.check.afterwards")
    answers = lazy_module("chalicelib.quota.answers")
    approval_rules = lazy_module("chalicelib.check.approvals")
    auth = lazy_module("chalicelib.auth.authorizer")
    aws = lazy_module("chalicelib.aws")
    binding = lazy_module("chalicelib.check.binding")
    clock = lazy_module("chalicelib.clock")
    console_files = lazy_module("chalicelib.console_files")
    deadline = lazy_module("chalicelib.check.deadline")
    errors = lazy_module("chalicelib.errors")
    kept_results = lazy_module("chalicelib.check.results")
    lambda_hold = lazy_module("chalicelib.api.lambda_hold")
    notify = lazy_module("chalicelib.notify")
    pages = lazy_module("chalicelib.links.pages")
    ports = lazy_module("chalicelib.storage.ports")
    quota = lazy_module("chalicelib.quota.core")
    responses = lazy_module("chalicelib.api.responses")
    roles = lazy_module("chalicelib.auth.roles")
    shadow = lazy_module("chalicelib.check.shadow")
    tokens = lazy_module("chalicelib.auth.tokens")
    validation = lazy_module("chalicelib.check.requests")
    wiring = lazy_module("chalicelib.wiring")

__all__ = [
    "admin_requests",
    "afterwards",
    "answers",
    "approval_rules",
    "auth",
    "aws",
    "binding",
    "clock",
    "console_files",
    "deadline",
    "errors",
    "kept_results",
    "lambda_hold",
    "notify",
    "pages",
    "ports",
    "quota",
    "responses",
    "roles",
    "shadow",
    "tokens",
    "validation",
    "wiring",
]
