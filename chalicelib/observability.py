"""Structured logs and CloudWatch metrics (EMF) via Powertools, loaded on first use.

An allowed check writes no log line and no metric, so a container that only answers
allowed checks never imports Powertools, whose import costs more than the rest of the
check path's (bench/cold_start.py). The first log line or metric (a refusal, an error, a
client's fail-open report) loads it. X-Ray is
never imported: it adds hundreds of milliseconds to every cold start.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

SERVICE = "mcp-quota"
NAMESPACE = "McpQuota"
# A 500 the service answered for an unexpected exception (Lambda's Errors does not see
# it: the function returned), per function version, so that a canary's rollback alarm
# watches the new version alone (deploy/monitoring.py).
FAULT_METRIC = "UnhandledError"


class LazyLogger:
    """Powertools' Logger, built on the first log line; the correlation id is kept
    until then, so every line still carries the request's id."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._logger: Logger | None = None
        self._correlation_id: str | None = None

    def _get(self) -> Logger:
        if self._logger is None:
            from aws_lambda_powertools import Logger

            # ASCII-only JSON: a client's value can hold U+2028, U+2029 or C1 controls,
            # which Powertools' default (ensure_ascii=False) writes raw and log readers
            # take for line breaks; escaped, no value can start a line of its own.
            self._logger = Logger(
                service=self._service,
                json_serializer=functools.partial(
                    json.dumps, default=str, separators=(",", ":"), ensure_ascii=True
                ),
            )
            self._logger.set_correlation_id(self._correlation_id)
            # Chalice named its own `app.log` after the app, which is our service name, and
            # gave that logger a plain-text handler: Powertools' JSON handler is the one
            # that writes, so no line goes out twice.
            own = self._logger.registered_handler
            shared = logging.getLogger(self._service)
            for handler in list(shared.handlers):
                if handler is not own:
                    shared.removeHandler(handler)
        return self._logger

    def set_correlation_id(self, value: str | None) -> None:
        self._correlation_id = value
        if self._logger is not None:
            self._logger.set_correlation_id(value)

    def info(self, msg: str, **kwargs: Any) -> None:
        self._get().info(msg, stacklevel=3, **kwargs)

    def warning(self, msg: str, **kwargs: Any) -> None:
        self._get().warning(msg, stacklevel=3, **kwargs)

    def error(self, msg: str, **kwargs: Any) -> None:
        self._get().error(msg, stacklevel=3, **kwargs)

    def exception(self, msg: str, **kwargs: Any) -> None:
        self._get().exception(msg, stacklevel=3, **kwargs)


logger = LazyLogger(SERVICE)


def count(name: str, category: str | None = None, value: int = 1) -> None:
    """Emit one count metric, dimensioned by category only (never by session id)."""
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    with single_metric(
        name=name, unit=MetricUnit.Count, value=value, namespace=NAMESPACE
    ) as metric:
        metric.add_dimension(name="service", value=SERVICE)
        if category is not None:
            metric.add_dimension(name="category", value=category)


def count_fault() -> None:
    """Count one unhandled error, dimensioned by the function version that answered it."""
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    with single_metric(
        name=FAULT_METRIC, unit=MetricUnit.Count, value=1, namespace=NAMESPACE
    ) as metric:
        metric.add_dimension(name="service", value=SERVICE)
        metric.add_dimension(name="version", value=version)
