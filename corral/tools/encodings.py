"""Text that is not UTF-8: UTF-16/UTF-32 with a byte order mark, and the legacy
encodings the operator names ([workspace] fallback_encodings), read as text and
written back byte for byte in the encoding they came in.

No detector library (charset-normalizer, chardet): a detector guesses, and a
wrong guess here would rewrite a file's bytes in the wrong encoding on the next
edit. A BOM is certain, and for the rest the operator names the encodings, tried
in order; each is kept only if the bytes decode and encode back to exactly the
same bytes, so no edit can change a byte it did not target.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

from corral.errors import CorralError

BINARY_SNIFF = 8192  # a NUL in the first 8 KiB means binary, as git decides
# Longest first: the UTF-32-LE mark begins with the UTF-16-LE one.
BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)

# Looked up now, at import, in the zygote: a confined worker cannot read the
# stdlib's encodings/ modules, and Python caches every codec it has looked up.
# The BOM codecs serve every sandbox; a legacy one only the sandboxes that name it,
# so those are looked up by each such worker before it confines itself (preload):
# all of them in the zygote cost every sandbox's start ~10 ms (the CJK codecs).
for _name in (name for _, name in BOMS):
    codecs.lookup(_name)


def preload(names: tuple[str, ...]) -> None:
    """Look up the legacy codecs `names` (already checked against LEGACY_ENCODINGS),
    while the process can still read the stdlib: before it is confined."""
    for name in names:
        codecs.lookup(name)


class Decoded(NamedTuple):
    """A file's text and how to write it back: `bom` + text encoded in `encoding`."""

    text: str
    encoding: str  # "utf-8" or a Python codec name
    bom: bytes = b""

    def encode(self, text: str, field: str) -> bytes:
        """`text` as this file's bytes; invalid_arguments, naming the argument that
        brought them, if it holds characters the encoding cannot write."""
        try:
            return self.bom + text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start : exc.end]
            raise CorralError(
                "invalid_arguments",
                f"argument '{field}' holds {bad[:10]!r}, which the file's encoding "
                f"{self.encoding} cannot write; nothing was written.",
            ) from None


def not_utf8(head: bytes) -> str | None:
    """Why a file that starts with `head` (its first BINARY_SNIFF bytes) is not
    UTF-8 text, as far as its start tells: the encoding its byte order mark names,
    or "binary" for a NUL; None when its start says nothing against it."""
    for bom, encoding in BOMS:
        if head.startswith(bom):
            return encoding
    return "binary" if b"\0" in head[:BINARY_SNIFF] else None


def utf8_text(data: bytes) -> str | None:
    """The text of `data` as UTF-8, or None when it has NUL bytes near the start or
    is not valid UTF-8 (~0.5 ms a MiB)."""
    if b"\0" in data[:BINARY_SNIFF]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def decode(data: bytes, fallbacks: tuple[str, ...] = ()) -> Decoded | None:
    """The file's text: UTF-8, else UTF-16/32 by its BOM, else the first fallback
    encoding that round-trips; None: binary."""
    text = utf8_text(data)
    if text is not None:
        return Decoded(text, "utf-8")
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return _exact(data[len(bom):], encoding, bom)
    if b"\0" in data[:BINARY_SNIFF]:
        return None
    for encoding in fallbacks:
        decoded = _exact(data, encoding, b"")
        if decoded is not None:
            return decoded
    return None


def _exact(body: bytes, encoding: str, bom: bytes) -> Decoded | None:
    """`body` decoded, if it is text (no NUL near the start) that encodes back to
    the same bytes (cp932, for one, has two byte pairs for some characters)."""
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError:
        return None
    if "\0" in text[:BINARY_SNIFF] or text.encode(encoding) != body:
        return None
    return Decoded(text, encoding, bom)
