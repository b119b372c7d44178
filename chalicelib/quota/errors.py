"""The core's own error: what it raises knows nothing of HTTP (`chalicelib/errors.py` maps
it, with the others, in one place)."""

from __future__ import annotations


class ConfigurationError(Exception):
    """Settings or the policy document are invalid; raised at start-up, never per request."""
