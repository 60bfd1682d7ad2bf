"""The content version token: a hash of the bytes, never mtime (a formatter that
rewrites a file identically must not make an agent's edit fail)."""

import hashlib
from collections.abc import Iterable


def content_version(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def chunked_version(chunks: Iterable[bytes]) -> str:
    """content_version of the concatenated chunks, without holding them all."""
    digest = hashlib.blake2b(digest_size=12)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
