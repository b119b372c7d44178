"""The check: parse a request, count it at every scope, and act on a refusal."""
