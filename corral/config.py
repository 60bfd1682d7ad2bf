"""corral.toml -> Policy + Limits + SandboxOptions.

INTERFACE STUB for the dataclasses (real); the policy/config helper adds parsing
(`load_config`, discovery of corral.toml in the workspace) and clear errors.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_read_bytes: int = 256 * 1024  # returned per read: what fits a model's context
    max_write_bytes: int = 1024 * 1024  # per write/edit result/append
    max_file_bytes: int = 64 * 1024 * 1024  # largest file read, edited or grown by append
    max_list_entries: int = 500
    timeout_s: float = 10.0


@dataclass(frozen=True)
class SandboxOptions:
    workers: int = 2
    require: tuple[str, ...] = ()  # layers that must be active: "landlock", "seccomp", ...
    max_calls_per_worker: int = 10_000  # recycle after this many calls
    max_worker_rss_mb: int = 256  # recycle when RSS passes this
    max_frame_bytes: int = 64 * 1024 * 1024
    resolver: str = "auto"  # "openat2" | "walk": forces a resolver (tests run both)
