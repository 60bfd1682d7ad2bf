"""What a Pool's open sandboxes hold in the host's fds (counted in /proc/self/fd),
and that a Pool raises the soft RLIMIT_NOFILE to the hard one: under a soft limit
of 256, 100 sandboxes (4 fds each) open. In a child: the limit is the process's."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.mcp_helpers import REPO

SANDBOXES = 100
SOFT = 256  # below what SANDBOXES need
# each sandbox: its workspace's directory, and its history store's directory, lock
# and work directory
FDS_PER_SANDBOX = 4

CHILD = """
import json, os, resource, sys
from corral import Pool
from corral.config import HistoryOptions

top, count, soft = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
def fds():
    # what a sandbox holds for its life: a worker's socket and pidfd go when it is reaped
    links = []
    for name in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:  # the listing's own
            pass
    return sum(not link.startswith(("socket:", "anon_inode:")) for link in links)
with Pool() as pool:
    history = HistoryOptions(path=os.path.join(top, "store"))
    def open_one(index):
        ws = os.path.join(top, f"ws{index}")
        os.mkdir(ws)
        return pool.sandbox(ws, history=history)
    first = open_one(0)  # the pool's own fds (its zygote's channel, a pidfd) come with it
    assert first.call("stat_file", {"path": "."})["ok"]
    before = fds()
    sandboxes = [open_one(index) for index in range(1, count + 1)]
    after = fds()
    answer = sandboxes[-1].call("stat_file", {"path": "."})
    print(json.dumps({"per_sandbox": (after - before) / count, "ok": answer["ok"],
                      "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


def test_a_pool_opens_more_sandboxes_than_the_soft_limit_of_fds_allows(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < SANDBOXES * FDS_PER_SANDBOX * 2:
        pytest.skip(f"the hard limit of open files is {hard}")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), str(SANDBOXES), str(SOFT)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["ok"] and seen["soft"] == hard
    assert seen["per_sandbox"] <= FDS_PER_SANDBOX, seen
