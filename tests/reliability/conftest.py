"""Reliability and security tests reuse the API layer's in-process client."""

from __future__ import annotations

from tests.api.conftest import api

__all__ = ["api"]
