"""Server-rendered HTML pages of the one-click email links: no script, everything
escaped, one inline style sheet (no CDN, no external font)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

STYLE = """
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
background:#f4f5f7;color:#1d2330}
main{max-width:36rem;margin:2rem auto;padding:1.5rem;background:#fff;border-radius:8px;
box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{font-size:1.3rem;margin-top:0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem}
dt{color:#5b6475}dd{margin:0;word-break:break-all}
button{font:inherit;padding:.6rem 1.2rem;border:0;border-radius:6px;background:#1f5fbf;
color:#fff;cursor:pointer}
.bad{border-left:4px solid #c0392b;padding-left:1rem}
.ok{border-left:4px solid #2e8b57;padding-left:1rem}
a{color:#1f5fbf}
"""

# The token is in the URL: no referrer leaves the page, nothing is cached or framed,
# and the only thing the page can do is post its form to itself.
HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}


@dataclass(frozen=True)
class Page:
    """An HTML page and the status it is served with."""

    status: int
    title: str
    html: str


def facts(rows: list[tuple[str, str | None]]) -> str:
    """A definition list of label/value pairs (values escaped; empty ones left out)."""
    items = "".join(
        f"<dt>{escape(label)}</dt><dd>{escape(value)}</dd>" for label, value in rows if value
    )
    return f"<dl>{items}</dl>"


def render(status: int, title: str, body: str, tone: str = "") -> Page:
    """A whole page; `body` is HTML that the caller has escaped."""
    css_class = f' class="{tone}"' if tone else ""
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)} - mcp-quota</title><style>{STYLE}</style></head>"
        f"<body><main><h1{css_class}>{escape(title)}</h1>{body}</main></body></html>"
    )
    return Page(status, title, html)


def paragraph(text: str) -> str:
    """One escaped paragraph."""
    return f"<p>{escape(text)}</p>"


def link(href: str, text: str) -> str:
    """An escaped link."""
    return f'<p><a href="{escape(href, quote=True)}">{escape(text)}</a></p>'


def confirm_form(label: str) -> str:
    """The one button: a POST to this same URL."""
    return f'<form method="post"><button type="submit">{escape(label)}</button></form>'
