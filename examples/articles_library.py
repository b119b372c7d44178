"""A tiny in-memory article store shared by the example MCP servers.

`deletions` is the side effect the quota protects: tests and the demo read it to
prove that a refused `delete_tag` never ran.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

_ARTICLES = (
    ("Rate limiting AI agents", ("ai", "agents", "quotas")),
    ("DynamoDB conditional writes", ("aws", "dynamodb")),
    ("Writing MCP servers in Python", ("mcp", "python", "agents")),
    ("Idempotent retries", ("reliability", "http")),
    ("What a runaway loop costs", ("ai", "incidents")),
)


@dataclass
class Library:
    """Articles with tags, and counters of what the tools really did."""

    articles: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"id": index + 1, "title": title, "tags": list(tags)}
            for index, (title, tags) in enumerate(_ARTICLES)
        ]
    )
    searches: int = 0
    deletions: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def search(self, query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Articles whose title or tags contain `query` (case-insensitive)."""
        needle = query.lower()
        with self._lock:
            self.searches += 1
            return [
                {"id": article["id"], "title": article["title"], "tags": list(article["tags"])}
                for article in self.articles
                if needle in article["title"].lower()
                or any(needle in tag for tag in article["tags"])
            ][:limit]

    def delete_tag(self, tag: str) -> dict[str, Any]:
        """Remove `tag` from every article; counts one deletion whether or not it existed."""
        with self._lock:
            self.deletions += 1
            touched = 0
            for article in self.articles:
                if tag in article["tags"]:
                    article["tags"].remove(tag)
                    touched += 1
            return {"tag": tag, "articles_changed": touched, "deletions_so_far": self.deletions}

    def delete_tags(self, tags: list[str]) -> dict[str, Any]:
        """Remove each tag from every article: one deletion per tag."""
        results = [self.delete_tag(tag) for tag in tags]
        changed = sum(int(r["articles_changed"]) for r in results)
        return {"tags": list(tags), "articles_changed": changed}

    def snapshot(self) -> dict[str, int]:
        """The side-effect counters."""
        with self._lock:
            return {"searches": self.searches, "deletions": self.deletions}
