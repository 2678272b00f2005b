"""The web console's files (static/): one page, its script and its style, served by the API at /ui. They
ship inside the package (no CDN), so the console works offline and in the Lambda bundle alike."""

from __future__ import annotations

from functools import cache
from importlib import resources

# What /ui/<name> may serve, and as what. Nothing else in the package is reachable.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}

# The page's own files only: no inline script or style, no other origin, not framed.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset(name: str) -> str | None:
    """The text of one console file, or None if there is no such file. Only the allow-list is cached:
    anyone may ask for /ui/<anything>, and a cache of every name asked for would grow without bound."""
    return _read(name) if name in ASSETS else None


@cache
def _read(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")
