"""The web console's static files, shipped in the package (no CDN, no external font)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

CONSOLE_DIR = Path(__file__).resolve().parent / "console"
CONTENT_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# Same-origin only: the token goes nowhere but this API, and the authorization code only
# to the identity provider's token endpoint (`connect`, when sign-in is configured).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'{connect}; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@cache
def console_file(name: str) -> tuple[str, str] | None:
    """A console file's text and content type, or None for any other name."""
    content_type = CONTENT_TYPES.get(name)
    if content_type is None:
        return None
    return (CONSOLE_DIR / name).read_text(encoding="utf-8"), content_type


def console_headers(content_type: str, connect: str = "") -> dict[str, str | list[str]]:
    """Headers of a console file; `connect`: one more origin the page may fetch from."""
    return {
        "Content-Type": content_type,
        "Content-Security-Policy": CSP.format(connect=f" {connect}" if connect else ""),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


def trailing_slash(request_path: str) -> bool:
    """Whether the page was asked for as `.../console/`, where its relative links break."""
    return request_path.endswith("/console/")
