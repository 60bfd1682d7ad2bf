"""The host side of history: where a workspace's store lives, what it shows
(history, checkpoints) and keeping it within its bounds. The host reads and
trims the store directly (it lies outside every root); every change to the
tree, undo and rewind included, happens in a confined worker.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Sequence
from typing import Any

from corral.config import HistoryOptions
from corral.history.store import Store, id_pid, prepare

DAY_S = 86_400.0
PUBLIC_STATE = ("type", "size", "mode", "version")  # what history() shows of a state


def public(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """A before/after state as a user sees it (None: the path did not exist)."""
    if state is None:
        return None
    shown = {key: state[key] for key in PUBLIC_STATE if key in state}
    if state["type"] != "file":
        shown.pop("size", None)  # a directory's or a link's st_size says nothing useful
    return shown


EVICT_TO = 0.9  # of max_bytes: what an over-full store is brought back to


class History:
    """One sandbox's view of its workspace's store."""

    def __init__(self, options: HistoryOptions, workspace: str, roots: Sequence[str]) -> None:
        self.options = options
        self.workspace = workspace
        self.path = prepare(options.path, workspace, list(roots))
        self.store = Store.open(self.path)
        self._lock = threading.Lock()
        self._usage = self.store.evict(options.max_bytes, options.max_age_days * DAY_S)

    def close(self) -> None:
        self.store.close()

    def dead_writers(self) -> list[int]:
        """Pids of pending records whose writer is gone (killed mid-call)."""
        pids = {id_pid(record_id) for record_id in self.store.listing().pending}
        return sorted(pid for pid in pids if not _alive(pid))

    def stored(self, size: int) -> None:
        """A call put `size` bytes into the store: once it is over its bound, evict down
        to EVICT_TO of it. Eviction reads the whole store; evicting only back under
        the bound made every later write read it again (~3-5 ms a call on a full
        store of ~1,000 changes), now one write in many does."""
        with self._lock:
            self._usage += size
            if self._usage > self.options.max_bytes:
                self._usage = self.store.evict(
                    int(self.options.max_bytes * EVICT_TO), self.options.max_age_days * DAY_S
                )

    def checkpoint(self, label: str | None) -> str:
        return self.store.checkpoint(label)

    def entries(self, path: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first: one entry per path a change touched, and the checkpoints."""
        wanted = None if path is None else self._normal(path)
        listing = self.store.listing()
        checkpoints = set() if wanted is not None else set(listing.checkpoints)
        found: list[dict[str, Any]] = []
        for item_id in sorted([*listing.records, *checkpoints], reverse=True):
            if len(found) >= limit:
                break
            if item_id in checkpoints:
                info = self.store.checkpoint_info(item_id) or {}
                found.append({"id": item_id, "time": info.get("time"), "tool": None,
                              "path": None, "action": "checkpoint", "before": None,
                              "after": None, "checkpoint": info.get("label")})
                continue
            record = self.store.record(item_id)
            if record is None:
                continue
            for entry in record.get("entries", ()):
                if wanted is None or entry["path"] == wanted:
                    found.append(_entry(record, entry))
        return found[:limit]

    def _normal(self, path: str) -> str:
        """The path as records name it: relative to the workspace, or absolute."""
        normal = posixpath.normpath(path)
        if normal.startswith(self.workspace + "/"):
            return normal[len(self.workspace) + 1:]
        return normal


def _entry(record: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    shown = {"id": record["id"], "time": record["time"], "tool": record["tool"],
             "path": entry["path"], "action": entry["action"],
             "before": public(entry["before"]), "after": public(entry["after"])}
    for key in ("to", "source"):
        if key in entry:
            shown["destination" if key == "to" else "source"] = entry[key]
    if "undoes" in record:
        shown["undoes"] = record["undoes"]
    return shown


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
