"""The zygote template (sandbox/template.py, launcher.py): every sandbox's zygote is a
fork of one exec'd interpreter per host. A zygote forked late, from a template that
has served other sandboxes, confines its workers exactly as the first one forked;
what the template compiled once is what a fresh compile gives; a template that
dies, is misused, or cannot prepare fails closed and clearly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

import corral
from corral.calls.control import ForkZygote
from corral.errors import SandboxError
from corral.sandbox import launcher
from corral.sandbox.launcher import ZYGOTE_ENTRY, launch_zygote, template_pids, wait_for_exit
from corral.sandbox.protocol import CONTROL_FRAME_BYTES, encode, read_frame
from corral.seccomp import MODE_CHANGES, compile_native, load_profile, refusing
from tests.helpers.broker_helpers import MakeBroker, call, kernel_view, wait_gone


def fresh_template() -> None:
    """Stop this process's templates: the next sandbox starts a new one."""
    launcher._stop_all()


def test_a_zygote_forked_late_confines_its_workers_as_the_first_one(
    make_broker: MakeBroker,
) -> None:
    fresh_template()
    first = make_broker(workers=1)
    (template,) = template_pids()
    for _ in range(3):  # the template serves others, which come and go
        make_broker(workers=1).close()
    late = make_broker(workers=1)
    assert template_pids() == [template]  # the same template forked both zygotes
    (one,), (other,) = first.pids()["workers"], late.pids()["workers"]
    assert late.confinement == first.confinement
    assert kernel_view(other) == kernel_view(one)
    assert kernel_view(other)["Seccomp"] == "2" and kernel_view(other)["NoNewPrivs"] == "1"
    assert not call(late, "read_file", path="../outside/secret.txt")["ok"]
    assert call(late, "read_file", path="hello.txt")["ok"]


def test_the_filters_the_template_compiled_once_are_those_a_fresh_compile_gives() -> None:
    _, sock, pidfd = launch_zygote("tests.helpers.template_probe", b"")
    try:
        sock.setblocking(True)
        report = read_frame(sock.fileno(), 1 << 20)
    finally:
        sock.close()
        os.close(pidfd)
    assert report is not None
    assert report["cached"] == 2  # compiled before the fork, not in the zygote
    assert report["builtins"] == 1  # so were the built-in rules every default policy uses
    profile = load_profile()
    assert bytes.fromhex(report["programs"]["True"]) == compile_native(profile)
    assert bytes.fromhex(report["programs"]["False"]) == compile_native(
        refusing(profile, MODE_CHANGES))


def test_a_template_that_cannot_prepare_says_why() -> None:
    with pytest.raises(SandboxError, match="could not start: the seccomp profile does not"):
        launch_zygote("tests.helpers.template_unprepared", b"")
    with pytest.raises(SandboxError, match="could not start: the seccomp profile does not"):
        launch_zygote("tests.helpers.template_unprepared", b"")  # every time, the same template


def test_a_template_that_cannot_even_import_its_entry_fails_the_start() -> None:
    with pytest.raises(SandboxError, match="could not start: the zygote template"):
        launch_zygote("tests_no_such_entry_module", b"")


def test_a_template_that_hangs_fails_the_start_saying_so_and_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One stuck before its first answer: the start fails at the timeout, saying so;
    the template is killed, and the next start tries a fresh one rather than the
    channel the first gave up on."""
    monkeypatch.setattr(launcher, "START_TIMEOUT_S", 1.0)
    for _ in range(2):
        with pytest.raises(SandboxError, match="template did not answer within 1 s"):
            launch_zygote("tests.helpers.template_hangs", b"")
    hung = [child.pid for child in psutil.Process().children()
            if "template_hangs" in " ".join(child.cmdline())]
    assert wait_gone(hung) == []


def test_a_template_that_sends_garbage_fails_the_start_and_is_killed() -> None:
    for _ in range(2):
        with pytest.raises(SandboxError, match="template broke its channel"):
            launch_zygote("tests.helpers.template_garbage", b"")
    spoke = [child.pid for child in psutil.Process().children()
             if "template_garbage" in " ".join(child.cmdline())]
    assert wait_gone(spoke) == []


def test_a_template_that_died_is_replaced(make_broker: MakeBroker) -> None:
    fresh_template()
    make_broker(workers=1).close()
    (dead,) = template_pids()
    os.kill(dead, signal.SIGKILL)
    assert wait_gone([dead]) == []
    broker = make_broker(workers=1)
    assert call(broker, "read_file", path="hello.txt")["ok"]
    assert template_pids() != [dead]


def test_running_sandboxes_outlive_their_templates_death(make_broker: MakeBroker) -> None:
    """The template is shared by every sandbox of the host: its death takes none of
    their zygotes, so each still serves and still forks workers."""
    fresh_template()
    brokers = [make_broker(workers=1) for _ in range(2)]
    (template,) = template_pids()
    os.kill(template, signal.SIGKILL)
    assert wait_gone([template]) == []
    for broker in brokers:
        zygote = broker.pids()["zygote"]
        assert call(broker, "read_file", path="hello.txt")["ok"]
        (worker,) = broker.pids()["workers"]
        os.kill(worker, signal.SIGKILL)
        assert wait_gone([worker]) == []
        assert call(broker, "read_file", path="hello.txt")["ok"]  # a fresh worker's answer
        assert broker.pids()["zygote"] == zygote and broker.pids()["workers"] != [worker]


@pytest.mark.parametrize("frame", [
    {"op": "spawn"},  # a zygote's op, not the template's
    {"op": "zygote", "more": 1},
    ForkZygote().to_wire(),  # without the zygote's socket attached
])
def test_a_template_stops_at_anything_but_a_fork_request(frame: dict[str, object]) -> None:
    template = launcher.Template(launcher._key(ZYGOTE_ENTRY))
    try:
        template._sock.setblocking(True)
        template._sock.sendall(encode(frame, CONTROL_FRAME_BYTES))
        assert wait_for_exit(template.pid, 30.0)  # it forked nothing and left
    finally:
        template.stop()


def test_a_host_that_changes_its_locale_gets_a_template_with_it(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh_template()
    make_broker(workers=1).close()
    before = template_pids()
    monkeypatch.setenv("LC_MESSAGES", "C.UTF-8")
    broker = make_broker(workers=1)
    zygote = broker.pids()["zygote"]
    assert "LC_MESSAGES=C.UTF-8" in Path(f"/proc/{zygote}/environ").read_text().split("\0")
    assert set(before) < set(template_pids())


FORKED_HOST = textwrap.dedent(
    """
    import json, os, sys
    from corral.api import Sandbox
    from corral.sandbox.launcher import template_pids

    with Sandbox(sys.argv[1]) as sandbox:
        assert sandbox.call("read_file", {"path": "hello.txt"})["ok"]
    parent = template_pids()
    read_fd, write_fd = os.pipe()
    if os.fork() == 0:  # the copy starts a template of its own, and leaves its parent's
        with Sandbox(sys.argv[1]) as sandbox:
            ok = sandbox.call("read_file", {"path": "hello.txt"})["ok"]
        os.write(write_fd, json.dumps([ok, template_pids()]).encode())
        os._exit(0)
    os.close(write_fd)
    ok, child = json.loads(os.read(read_fd, 4096))
    os.wait()
    with Sandbox(sys.argv[1]) as sandbox:
        again = sandbox.call("read_file", {"path": "hello.txt"})["ok"]
    print(json.dumps([ok, again, parent, child, template_pids()]))
    """
)


def test_a_forked_host_starts_its_own_template_and_leaves_its_parents(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED_HOST, str(workspace)], capture_output=True, text=True,
        timeout=120, check=True, cwd=Path(__file__).resolve().parents[1],
    )
    ok, again, parent, child, after = json.loads(done.stdout)
    assert ok and again
    assert len(child) == 1 and child != parent
    assert after == parent and wait_gone(child) == []  # it died with the copy


def test_a_closed_sandboxs_zygote_is_reaped_by_the_template(make_broker: MakeBroker) -> None:
    broker = make_broker(workers=1)
    zygote = broker.pids()["zygote"]
    broker.close()
    deadline = time.monotonic() + 30.0
    while psutil.pid_exists(zygote):  # a zombie until the template's waitpid
        assert time.monotonic() < deadline, "the template left its zygote a zombie"
        time.sleep(0.01)


def test_prestart_starts_the_template_the_next_sandbox_uses(make_broker: MakeBroker) -> None:
    fresh_template()
    corral.prestart()  # returns at once: the template imports while the host goes on
    started = template_pids()
    assert len(started) == 1
    assert call(make_broker(workers=1), "read_file", path="hello.txt")["ok"]
    assert template_pids() == started


def test_the_template_holds_its_channel_and_dev_null_and_no_fd_of_the_host(
    make_broker: MakeBroker,
) -> None:
    """The spawn passes every fd the host left inheritable: the template closes them."""
    fresh_template()
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)
    pipe = os.readlink(f"/proc/self/fd/{read_end}")
    try:
        make_broker(workers=1).close()
        (template,) = template_pids()
        fds = {int(fd): os.readlink(f"/proc/{template}/fd/{fd}")
               for fd in os.listdir(f"/proc/{template}/fd")}
    finally:
        os.close(read_end)
        os.close(write_end)
    assert pipe not in fds.values()
    assert fds[0] == fds[1] == os.devnull  # stdout may be the host's protocol
    assert fds[launcher.CHANNEL_FD].startswith("socket:")


NO_STDIN = textwrap.dedent(
    """
    import os, sys
    os.close(0)  # the template's channel may now be made on fd 0
    from corral.api import Sandbox
    with Sandbox(sys.argv[1]) as sandbox:
        print(sandbox.call("read_file", {"path": "hello.txt"})["ok"])
    """
)


def test_a_host_with_its_stdin_closed_starts_a_template(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_STDIN, str(workspace)], capture_output=True, text=True,
        timeout=120, check=True, cwd=Path(__file__).resolve().parents[1],
    )
    assert done.stdout.split() == ["True"]


def test_only_a_template_started_on_the_main_thread_dies_with_it() -> None:
    """The death signal follows the thread that started the template: a template
    started elsewhere relies on its channel's end alone."""
    started: list[launcher.Template] = []
    worker = threading.Thread(target=lambda: started.append(launcher.Template(
        launcher._key(ZYGOTE_ENTRY))))
    worker.start()
    worker.join()
    started.append(launcher.Template(launcher._key(ZYGOTE_ENTRY)))
    try:
        flags = [_death_flag(t.pid) for t in started]
    finally:
        for template in started:
            template.stop()
    assert flags == ["False", "True"]


def _death_flag(pid: int) -> str:
    """The last argument of the template's template.main(...): whether it takes the
    death signal. Read once the process has exec'd (its command line is empty, or the
    parent's, until then: a busy machine shows it)."""
    deadline = time.monotonic() + 10
    while True:
        line = psutil.Process(pid).cmdline()
        if (line and "main(" in line[-1]) or time.monotonic() > deadline:
            return line[-1].rstrip(")").rsplit(", ", 1)[-1]
        time.sleep(0.01)


def test_a_template_reaped_by_something_else_is_stopped_without_error() -> None:
    """A host with its own SIGCHLD handler may reap the template first: stop() then
    neither raises nor signals whatever process has its pid now."""
    template = launcher.Template(launcher._key(ZYGOTE_ENTRY))
    os.kill(template.pid, signal.SIGKILL)
    os.waitpid(template.pid, 0)  # what such a handler does
    template.stop()
    assert template.exited and template.poll() is None  # gone, its code unknown


def test_a_template_that_never_forked_is_killed_and_reaped_at_stop() -> None:
    template = launcher.Template(launcher._key(ZYGOTE_ENTRY))
    template.stop()
    assert template.exited and template.returncode == -signal.SIGKILL
    assert not psutil.pid_exists(template.pid) or psutil.Process(template.pid).ppid() != os.getpid()


NO_STDERR = textwrap.dedent(
    """
    import os, sys
    os.close(2)  # the template's own first fd would land on 2
    from corral.api import Sandbox
    from corral.sandbox.launcher import template_pids
    with Sandbox(sys.argv[1]) as sandbox:
        assert sandbox.call("read_file", {"path": "hello.txt"})["ok"]
        (template,) = template_pids()
        print(os.readlink(f"/proc/{template}/fd/2"))
    """
)


def test_a_host_without_stderr_gives_its_template_dev_null_there(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_STDERR, str(workspace)], capture_output=True, text=True,
        timeout=120, check=True, cwd=Path(__file__).resolve().parents[1],
    )
    assert done.stdout.split() == [os.devnull]


CLOSE_INHERITED = textwrap.dedent(
    """
    import json, os
    from corral.sandbox import confine
    kept = os.open(os.devnull, os.O_RDONLY)
    strays = [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]
    open_before = {int(name) for name in os.listdir("/proc/self/fd")}
    closed = []
    close = os.close
    def counted(fd):
        closed.append(fd)
        close(fd)
    def refused(*_):
        raise AssertionError("closerange")
    os.close, os.closerange = counted, refused
    confine.close_fds_but({kept})
    os.close = close
    left = {int(name) for name in os.listdir("/proc/self/fd")}
    print(json.dumps({"missed": sorted(open_before - {0, 1, 2, kept} - set(closed)),
                      "closes": len(closed), "kept": kept in left}))
    """
)


def test_the_template_closes_the_fds_open_not_a_range() -> None:
    """Without close_range (Linux before 5.9), os.closerange calls close() once per
    possible fd number: the template closes the fds listed open, once each."""
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_INHERITED], capture_output=True, text=True,
        timeout=120, check=True, cwd=Path(__file__).resolve().parents[1],
    )
    found = json.loads(done.stdout)
    assert found["missed"] == [] and found["kept"]  # every other open fd closed, once each
    assert found["closes"] <= 16
