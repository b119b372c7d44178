"""`make run`'s test OpenID Connect issuer: LOCAL ONLY, never deployed (scripts/ is not in
the Lambda package). It stands in for Cognito so the console signs in for real on a
laptop and in the browser tests.

It serves the discovery document, its key set, `/authorize` (a form that picks one of
three people of tenant `demo`: an admin, an operator, a viewer; no password) and
`/token` (authorization code with a PKCE S256 verifier, or a refresh token), and signs
RS256 ID and access tokens shaped like Cognito's (`cognito:groups`, `token_use`). Its key
is made at start and lives in memory.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

CLIENT_ID = "mcp-quota-console-local"
TENANT = "demo"
# Who may sign in: the picker's names, their addresses and their one group each.
PEOPLE = {
    "admin": "admin@demo.example",
    "operator": "operator@demo.example",
    "viewer": "viewer@demo.example",
}
CODE_SECONDS = 60


def b64url(data: bytes) -> str:
    """Base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class SigningKey:
    """An RSA key that signs RS256 JWTs, and its public JWK."""

    def __init__(self, kid: str | None = None, bits: int = 2048) -> None:
        self.kid = kid or secrets.token_hex(8)
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=bits)

    def jwk(self) -> dict[str, str]:
        """The public key as a JWK."""
        numbers = self.private.public_key().public_numbers()
        size = (numbers.n.bit_length() + 7) // 8
        return {
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": self.kid,
            "n": b64url(numbers.n.to_bytes(size, "big")),
            "e": b64url(numbers.e.to_bytes(3, "big")),
        }

    def sign(self, claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
        """A compact RS256 JWS of `claims` (`header` adds to or overrides the header)."""
        head = {"alg": "RS256", "typ": "JWT", "kid": self.kid, **(header or {})}
        signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = self.private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(signature)}"


@dataclass(frozen=True)
class Grant:
    """An authorization code's or refresh token's binding."""

    person: str
    redirect_uri: str
    challenge: str
    expires_at: float


class LocalIssuer:
    """The issuer's state: its key, the codes and refresh tokens it has handed out."""

    def __init__(self, url: str, redirect_uri: str, token_seconds: int = 3600) -> None:
        self.url = url
        self.redirect_uri = redirect_uri
        self.token_seconds = token_seconds
        self.key = SigningKey()
        self._codes: dict[str, Grant] = {}
        self._refresh: dict[str, str] = {}
        self._lock = threading.Lock()

    def discovery(self) -> dict[str, Any]:
        """The OpenID configuration."""
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": f"{self.url}/jwks.json",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile"],
        }

    def tokens(self, person: str) -> dict[str, Any]:
        """A person's ID, access and refresh tokens."""
        now = int(time.time())
        common = {
            "iss": self.url,
            "sub": f"local-{person}",
            "iat": now,
            "exp": now + self.token_seconds,
            "cognito:groups": [f"mcp-quota:{TENANT}:{person}"],
            "cognito:username": person,
        }
        id_token = {**common, "aud": CLIENT_ID, "token_use": "id", "email": PEOPLE[person]}
        access = {**common, "client_id": CLIENT_ID, "token_use": "access", "scope": "openid"}
        refresh = secrets.token_urlsafe(32)
        with self._lock:
            self._refresh[refresh] = person
        return {
            "id_token": self.key.sign(id_token),
            "access_token": self.key.sign(access),
            "refresh_token": refresh,
            "token_type": "Bearer",
            "expires_in": self.token_seconds,
        }

    def authorize(self, query: dict[str, str]) -> str | None:
        """Why an authorization request is refused; None if it may go on."""
        if query.get("response_type") != "code" or query.get("client_id") != CLIENT_ID:
            return "unknown client or response type"
        if query.get("redirect_uri") != self.redirect_uri:
            return "the redirect URI is not the console's"
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return "PKCE with S256 is required"
        return None

    def code(self, person: str, query: dict[str, str]) -> str:
        """A single-use authorization code for a person picked in the form."""
        code = secrets.token_urlsafe(24)
        expires = time.time() + CODE_SECONDS
        grant = Grant(person, query["redirect_uri"], query["code_challenge"], expires)
        with self._lock:
            self._codes[code] = grant
        return code

    def exchange(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The token endpoint: a code and its PKCE verifier, or a refresh token."""
        if form.get("client_id") != CLIENT_ID:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") == "refresh_token":
            with self._lock:
                person = self._refresh.pop(form.get("refresh_token", ""), None)
            return (200, self.tokens(person)) if person else (400, {"error": "invalid_grant"})
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        if (
            grant is None
            or grant.expires_at < time.time()
            or grant.redirect_uri != form.get("redirect_uri")
            or b64url(hashlib.sha256(verifier.encode()).digest()) != grant.challenge
        ):
            return 400, {"error": "invalid_grant"}
        return 200, self.tokens(grant.person)


FORM = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Local sign-in</title></head><body>
<h1>Local sign-in (make run only)</h1>
<p>A test issuer of this laptop: pick who you are in tenant demo. No password.</p>
<form method="post" action="authorize">{hidden}
<label>Person <select name="person">{options}</select></label>
<button type="submit">Sign in</button></form></body></html>"""


def handler_for(issuer: LocalIssuer) -> type[BaseHTTPRequestHandler]:
    """The HTTP handler of one issuer."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Access-Control-Allow-Origin", "*")  # the console posts /token
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, value: dict[str, Any]) -> None:
            self._send(status, json.dumps(value).encode(), "application/json")

        def _form(self) -> dict[str, str]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", "replace")
            return {k: v[-1] for k, v in parse_qs(raw).items()}

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            if parts.path == "/.well-known/openid-configuration":
                self._json(200, issuer.discovery())
            elif parts.path == "/jwks.json":
                self._json(200, {"keys": [issuer.key.jwk()]})
            elif parts.path == "/authorize":
                problem = issuer.authorize(query)
                if problem:
                    self._send(400, problem.encode(), "text/plain; charset=utf-8")
                    return
                hidden = "".join(
                    f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                    for k, v in query.items()
                )
                options = "".join(f'<option value="{p}">{p} ({PEOPLE[p]})</option>' for p in PEOPLE)
                page = FORM.format(hidden=hidden, options=options)
                self._send(200, page.encode(), "text/html; charset=utf-8")
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self) -> None:
            form = self._form()
            path = urlsplit(self.path).path
            if path == "/token":
                self._json(*issuer.exchange(form))
            elif path == "/authorize":
                person = form.pop("person", "")
                if issuer.authorize(form) or person not in PEOPLE:
                    self._send(400, b"refused", "text/plain; charset=utf-8")
                    return
                answer = {"code": issuer.code(person, form)}
                if form.get("state"):
                    answer["state"] = form["state"]
                location = f"{form['redirect_uri']}?{urlencode(answer)}"
                self._send(302, b"", "text/plain", Location=location)
            else:
                self._json(404, {"error": "not_found"})

    return Handler


def start(port: int, redirect_uri: str, token_seconds: int = 3600) -> LocalIssuer:
    """Serve a local issuer on loopback `port` on a daemon thread."""
    issuer = LocalIssuer(f"http://127.0.0.1:{port}", redirect_uri, token_seconds)
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(issuer))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return issuer
