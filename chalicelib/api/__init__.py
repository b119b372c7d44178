"""The Lambda entry points: one Chalice blueprint per resource family, the authorizer,
the notifier, and the one module that shapes answers and maps errors to HTTP.

Every module here is imported when app.py registers the blueprints (the Lambda init
phase), so each names the rest of chalicelib through `chalicelib.lazy` and imports it on
first use: a check never loads the admin side (tests/api/test_lazy_imports.py).
"""
