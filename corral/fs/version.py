"""The content version token: a hash of the bytes, never mtime (a formatter that
rewrites a file identically must not make an agent's edit fail)."""

import hashlib


def content_version(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()
