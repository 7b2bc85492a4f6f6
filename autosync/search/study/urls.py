"""Storage URLs as they may be printed or stored: with their password masked."""

from __future__ import annotations

import re

# user:password@ in a URL; the password may hold '/' (only '@' must be escaped), so it runs to the last '@'
_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^/@:\s]*:)(?P<password>[^@\s]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&\s]*)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` (or any text holding URLs) with passwords replaced by *** (postgresql://user:***@host/db, also
    ?password=...): safe to print or store."""
    masked = _PASSWORD.sub(lambda m: f"{m['head']}***@", url)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['head']}***", masked)


def redact(text: str, url: str) -> str:
    """`text` (an error message, say) with `url`'s password masked wherever it appears."""
    text = redact_url(text.replace(url, redact_url(url)))
    for pattern in (_PASSWORD, _QUERY_PASSWORD):
        for match in pattern.finditer(url):
            if match["password"]:  # as a whole word only: a password 'p' masked every p of the message
                text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(match['password'])}(?![A-Za-z0-9])", "***", text)
    return text
