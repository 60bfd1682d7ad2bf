"""The content version token: a hash of the bytes, never mtime (a formatter that
rewrites a file identically must not make an agent's edit fail)."""

from collections.abc import Iterable

try:  # hashlib's own blake2b, without hashlib loading OpenSSL at every zygote start
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b


def content_version(data: bytes) -> str:
    return blake2b(data, digest_size=12).hexdigest()


def chunked_version(chunks: Iterable[bytes]) -> str:
    """content_version of the concatenated chunks, without holding them all."""
    digest = blake2b(digest_size=12)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
