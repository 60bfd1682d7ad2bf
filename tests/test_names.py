"""One name per meaning: a name given to one thing (Approve: a CallFlow's step;
Job: a call a line server runs) is no other module's name for something else
(the approve callback is api.Approver; what the host sends a worker is
messages.ToWorker, beside CallRequest, HistoryRequest and CleanupRequest)."""

from __future__ import annotations

import importlib
import pkgutil

import corral

NAMES = ("Approve", "Job", "Request")


def _modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(corral.__path__, "corral.")
                  if not info.name.endswith("__main__"))


def test_each_name_means_one_thing_across_the_package() -> None:
    meanings: dict[str, dict[int, list[str]]] = {name: {} for name in NAMES}
    for module_name in _modules():
        module = importlib.import_module(module_name)
        for name in NAMES:
            if name in vars(module):
                meanings[name].setdefault(id(vars(module)[name]), []).append(module_name)
    several = {name: sorted(where.values()) for name, where in meanings.items() if len(where) > 1}
    assert several == {}, f"names with several meanings (by the modules holding each): {several}"
