"""mcp-quota: the Chalice app. It registers the authorizer, the request middleware and
one blueprint per resource family; the routes live in chalicelib/api/, the logic in the
rest of chalicelib/.

Every module registered here imports the rest of chalicelib on first use
(`chalicelib.lazy`), and a check never loads the admin side; on Lambda, the init phase
also loads the check path and builds its DynamoDB client (`check.warm`), so the first
check finds them ready (bench/cold_start.py, tests/api/test_lazy_imports.py).
"""

from __future__ import annotations

import os

from chalice.app import Chalice

from chalicelib.api import (
    approvals,
    audit,
    check,
    console,
    grants,
    links,
    notifier,
    principals,
    sessions,
)
from chalicelib.api import results as result_routes
from chalicelib.api import tokens as token_routes
from chalicelib.api.authorizer import authorizers
from chalicelib.api.context import deps, on_request, reset_dependencies

# The tests and the model driver swap the container through here.
__all__ = ["app", "deps", "reset_dependencies"]

app = Chalice(app_name="mcp-quota")
app.debug = False  # never a stack trace in a response, in any stage

app.register_middleware(on_request, "http")
app.register_blueprint(authorizers)
app.register_blueprint(check.checks)
app.register_blueprint(result_routes.results)
app.register_blueprint(sessions.sessions)
app.register_blueprint(principals.principals)
app.register_blueprint(grants.grants)
app.register_blueprint(token_routes.tokens)
app.register_blueprint(audit.audit)
app.register_blueprint(links.links)
app.register_blueprint(console.console)
app.register_blueprint(notifier.notifications)
app.register_blueprint(approvals.approvals)

if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
    # Only the API function imports app.py (the authorizer and the notifier have their
    # own modules): its init phase loads the check path and builds its client.
    check.warm()
