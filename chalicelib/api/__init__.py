"""The Lambda entry points: one Chalice blueprint per resource family, the authorizer,
the notifier, and the one module that shapes answers and maps errors to HTTP.

Every module here is imported when app.py registers the blueprints (the Lambda init
phase), so each takes the rest of chalicelib from `deferred.py`, whose stand-ins import
a module on first use: a check never loads the admin side (tests/api/test_lazy_imports.py).
"""
