"""Structured logs and CloudWatch metrics (EMF) via Powertools. X-Ray is not imported:
it adds hundreds of milliseconds to every cold start."""

from __future__ import annotations

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

SERVICE = "mcp-quota"
NAMESPACE = "McpQuota"

logger = Logger(service=SERVICE)


def count(name: str, category: str | None = None, value: int = 1) -> None:
    """Emit one count metric, dimensioned by category only (never by session id)."""
    with single_metric(
        name=name, unit=MetricUnit.Count, value=value, namespace=NAMESPACE
    ) as metric:
        metric.add_dimension(name="service", value=SERVICE)
        if category is not None:
            metric.add_dimension(name="category", value=category)
