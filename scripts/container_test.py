"""corral's image in a real container runtime (podman), built from Debian packages
alone: no image registry is needed, or reached.

1. A base root file system of Debian bookworm (python3, python3-venv) made by
   mmdebstrap, kept as a tarball under /var/tmp between runs, imported into podman.
2. The image of deploy/Containerfile built on it, from wheels of corral and its
   dependencies made here with pip.
3. Each variant below runs the image with the workspace, the history store and
   the tenants file mounted, and checks, from inside the container:
   - `corral doctor`: Landlock and seccomp active, and the mount namespace's
     state said with its reason (a container's seccomp profile refuses unshare);
   - the escapes of the test suite refused: a `../` climb, a symbolic link out,
     /proc/self/root, .env;
   - a write, an edit and an undo;
   - `serve --http` through a port published on loopback: /healthz, /readyz, a
     tools/call with a tenant's token, and a tenant whose [sandbox] require names
     a layer the container lacks makes /readyz 503; a tenant added to the file
     is served after `kill -HUP 1` in the container; then `podman stop`
     (SIGTERM) drains and the server exits 0.

Variants: non-root with the runtime's default seccomp profile and capabilities
(--cap-drop=ALL --security-opt=no-new-privileges --read-only --user 10001);
root in the container (the runtime's default capabilities and profile,
--read-only); non-root and root with corral's own seccomp profile
(deploy/seccomp.json, as Kubernetes' `Localhost` type loads it); and non-root
with that profile less `unshare`, as the default profiles of Docker and
containerd refuse it (no mount namespace: the doctor must say why).

Run as root on a Debian-like machine (CI: `tox -e container`); the podman,
buildah and mmdebstrap packages are installed with apt-get when missing.
    python scripts/container_test.py [--keep-image] [--variant NAME]
Prints each variant's `corral doctor` output; exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
MIRRORS = ("http://deb.debian.org/debian",
           "deb http://deb.debian.org/debian-security bookworm-security main")
PACKAGES = ("python3", "python3-venv")
_KEY = hashlib.sha256(" ".join((SUITE, *MIRRORS, *PACKAGES)).encode()).hexdigest()[:12]
BASE_TAR = Path("/var/tmp") / f"corral-base-{SUITE}-{_KEY}.tar"
BASE_IMAGE = f"localhost/corral-base:{SUITE}-{_KEY}"
IMAGE = "localhost/corral:container-test"
USER = "10001:10001"  # the image's user
APT_PACKAGES = ("podman", "buildah", "mmdebstrap", "uidmap", "runc")
SETTLE_S = 60.0
PROCESSES = 4096  # RLIMIT_NPROC in the container: the pool's workers and more
TOKEN = "container-test-token-0123456789"
SECOND_TOKEN = "container-test-token-added-at-sighup"
READ = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "hello.txt"},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}}}}
STRICT = ("--cap-drop=ALL", "--security-opt=no-new-privileges", "--read-only", f"--user={USER}")
VARIANTS: dict[str, tuple[str, ...]] = {
    "non-root, the runtime's default seccomp profile": STRICT,
    "root, the runtime's default capabilities and seccomp profile": ("--read-only", "--user=0:0"),
    "non-root, corral's seccomp profile": (
        *STRICT, f"--security-opt=seccomp={REPO / 'deploy' / 'seccomp.json'}"),
    "root, corral's seccomp profile": (
        "--read-only", "--user=0:0", f"--security-opt=seccomp={REPO / 'deploy' / 'seccomp.json'}"),
    # corral's profile less unshare: a worker gets no mount namespace, as under the
    # default profiles of Docker and containerd (Kubernetes' RuntimeDefault there)
    "non-root, corral's seccomp profile without unshare": (
        *STRICT, "--security-opt=seccomp={no_unshare}"),
}
NAMESPACE_CALLS = ("unshare",)  # what the last variant's profile leaves out


def cgroup_v2_alone() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def podman(subcommand: str, *argv: str) -> list[str]:
    """A podman command line, with what machines like CI's need:
    - runc where the cgroups are not cgroup v2 alone (crun refuses "hybrid mode");
    - for `run` and `build`, rlimits no higher than this process's own: podman's
      defaults (1,048,576 open files, more processes than here) take
      CAP_SYS_RESOURCE to set, which a runner in a VM or a container may lack
      (the runtime then fails EPERM)."""
    runtime = [] if cgroup_v2_alone() else ["--runtime=runc"]
    limits: list[str] = []
    if subcommand in ("run", "build"):
        files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        files = 65536 if files == resource.RLIM_INFINITY else min(files, 65536)
        limits = ["--ulimit", f"nofile={files}:{files}",
                  "--ulimit", f"nproc={PROCESSES}:{PROCESSES}"]
    return ["podman", *runtime, subcommand, *limits, *argv]


def run(*argv: str, check: bool = True, timeout: float = 600,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          input=stdin)
    if check and done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(argv)}\n{done.stdout}"
                         f"{done.stderr}")
    return done


def say(text: str) -> None:
    print(text, flush=True)


# -- the tools, the base and the image -----------------------------------------------------


def ensure_tools() -> None:
    tools = ["podman", "mmdebstrap", *([] if cgroup_v2_alone() else ["runc"])]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SystemExit(f"needs {', '.join(missing)}: apt-get install {' '.join(APT_PACKAGES)}")
    say(f"installing {' '.join(APT_PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES,
                  "netavark", "aardvark-dns", "containernetworking-plugins", "fuse-overlayfs",
                  "slirp4netns", "catatonit"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"failed: {' '.join(argv)}\n{done.stdout}{done.stderr}")


def base_image() -> None:
    """The base image, from the cached tarball (made by mmdebstrap when absent)."""
    if run(*podman("image", "exists", BASE_IMAGE), check=False).returncode == 0:
        return
    if not BASE_TAR.exists():
        say(f"making the base root file system with mmdebstrap ({' '.join(PACKAGES)})")
        partial = BASE_TAR.with_suffix(".partial")
        run("mmdebstrap", "--variant=minbase", "--format=tar", f"--include={','.join(PACKAGES)}",
            "--aptopt=APT::Install-Recommends \"false\"",
            "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*", SUITE, str(partial), *MIRRORS,
            timeout=1800)
        partial.rename(BASE_TAR)
    run(*podman("import", str(BASE_TAR), BASE_IMAGE))


def build_image() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-image-") as context:
        wheels = Path(context) / "deploy" / "wheels"
        say("building the wheels of corral[http] and its dependencies")
        run(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels),
            f"{REPO}[http]")
        say("building the image")
        run(*podman("build", "--quiet", "--file", str(REPO / "deploy" / "Containerfile"),
            "--build-arg", f"BASE={BASE_IMAGE}", "--tag", IMAGE, context), timeout=1200)


# -- one variant ---------------------------------------------------------------------------


class Failed(Exception):
    pass


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Failed(what)


class Variant:
    def __init__(self, name: str, options: Sequence[str], top: Path) -> None:
        self.name, self.options, self.top = name, tuple(options), top
        self.workspace, self.state, self.config = top / "workspace", top / "state", top / "config"
        for place in (self.workspace, self.state, self.config):
            place.mkdir()
        (self.workspace / "hello.txt").write_text("hello\n")
        (self.workspace / ".env").write_text("KEY=secret\n")
        (self.workspace / "out").symlink_to("/etc/passwd")
        (self.workspace / "strict").mkdir()
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        (self.config / "strict.toml").write_text(
            '[workspace]\nroot = "/workspace/strict"\n[sandbox]\nrequire = ["mount_namespace"]\n')
        (self.config / "tenants.toml").write_text(
            f'[[tenant]]\nname = "a"\ntoken_sha256 = "{digest}"\nworkspace = "/workspace"\n')
        (self.config / "strict-tenants.toml").write_text(
            f'[[tenant]]\nname = "a"\ntoken_sha256 = "{digest}"\nconfig = "strict.toml"\n')
        # owned by the container's user: root's worker makes its mount namespace
        # through a user namespace, where CAP_DAC_OVERRIDE does not reach files of
        # unmapped ids, so even root writes only what it owns
        user = next(option for option in options if option.startswith("--user="))
        uid, gid = (int(part) for part in user.removeprefix("--user=").split(":"))
        for path in (self.workspace, self.state, self.workspace / "strict",
                     self.workspace / "hello.txt", self.workspace / ".env"):
            os.chown(path, uid, gid)

    def mounts(self) -> list[str]:
        return ["--volume", f"{self.workspace}:/workspace",
                "--volume", f"{self.state}:/var/lib/corral",
                "--volume", f"{self.config}:/config:ro"]

    def corral(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(*podman("run", "--rm", *self.options, *self.mounts(), IMAGE, *argv),
                   check=check, timeout=120)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        done = self.corral("call", tool, json.dumps(arguments), check=False)
        try:
            result: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise Failed(f"{tool}: no JSON answer: {done.stdout}{done.stderr}") from None
        return result

    def check(self) -> str:
        doctor = self.corral("doctor").stdout
        worker = doctor.split("runs with:", 1)[1]
        layers = dict(line.split(None, 1) for line in worker.strip().splitlines())
        expect(int(layers["landlock_abi"]) > 0, f"no Landlock in the container:\n{doctor}")
        expect(layers["seccomp"] == "yes", f"no seccomp in the container:\n{doctor}")
        expect(layers["no_new_privs"] == "yes", f"no no_new_privs:\n{doctor}")
        no_namespace = layers["mount_namespace"] == "no"
        if no_namespace:
            expect("mount_namespace no (unshare: " in doctor, f"the doctor says not why:\n{doctor}")
        self.escapes()
        self.changes()
        self.http(no_namespace)
        return doctor

    def escapes(self) -> None:
        for arguments, code in (({"path": "../etc/passwd"}, "outside_workspace"),
                                ({"path": "out"}, "outside_workspace"),
                                ({"path": "/proc/self/root/etc/passwd"}, "outside_workspace"),
                                ({"path": ".env"}, "path_denied")):
            result = self.call("read_file", arguments)
            expect(not result["ok"] and result["error"]["code"] == code,
                   f"read_file {arguments}: {result}")

    def changes(self) -> None:
        wrote = self.call("write_file", {"path": "notes/a.txt", "content": "one\n"})
        expect(wrote["ok"], f"write_file: {wrote}")
        edited = self.call("edit_file", {"path": "notes/a.txt", "old_string": "one",
                                         "new_string": "two"})
        expect(edited["ok"], f"edit_file: {edited}")
        expect((self.workspace / "notes/a.txt").read_text() == "two\n", "the edit is not on disk")
        undone = self.corral("undo", "notes/a.txt", check=False)
        expect(undone.returncode == 0, f"undo: {undone.stdout}{undone.stderr}")
        expect((self.workspace / "notes/a.txt").read_text() == "one\n", "the undo is not on disk")

    def http(self, no_namespace: bool) -> None:
        self.serve("tenants.toml", ready=True)
        # a tenant requiring the mount namespace: ready only where the container has one
        self.serve("strict-tenants.toml", ready=not no_namespace)

    def serve(self, tenants: str, ready: bool) -> None:
        port = free_port()
        name = f"corral-test-{os.getpid()}-{port}"
        run(*podman("run", "--detach", "--name", name, *self.options, *self.mounts(),
            "--publish", f"127.0.0.1:{port}:8931", IMAGE, "serve", "--http", "0.0.0.0:8931",
            "--tenants", f"/config/{tenants}", "--drain-delay", "1", "--drain-timeout", "5"))
        try:
            # until the first check is done: 503 "starting" says nothing yet
            status, body = wait_for(port, "/readyz", lambda status, body: status in (200, 503)
                                    and body != b"not ready: starting\n")
            expect((status == 200) == ready, f"/readyz: {status} {body!r}")
            if not ready:
                expect(b"lacks required layer(s): mount_namespace" in body, f"/readyz: {body!r}")
                return
            expect(request(port, "GET", "/healthz")[:2] == (200, b"ok\n"), "/healthz")
            status, answer = request(port, "POST", "/mcp", READ)
            expect(status == 200 and b"hello" in answer, f"tools/call over HTTP: {answer!r}")
            self.reload(port, name, tenants)
        finally:
            stopped = run(*podman("stop", "--time", "30", name), check=False)
            code = run(*podman("inspect", "--format", "{{.State.ExitCode}}", name),
                       check=False).stdout.strip()
            logs = run(*podman("logs", name), check=False)
            run(*podman("rm", "--force", name), check=False)
        expect(stopped.returncode == 0 and code == "0",
               f"the server's exit after SIGTERM: {code}\n{logs.stdout}{logs.stderr}")
        expect("drained; exiting" in logs.stderr, f"no drain:\n{logs.stderr}")


    def reload(self, port: int, name: str, tenants: str) -> None:
        """A second token added to the tenants file, then SIGHUP to corral (the
        container's process 1, as `kubectl exec POD -- sh -c 'kill -HUP 1'` sends it)."""
        digest = hashlib.sha256(SECOND_TOKEN.encode()).hexdigest()
        with open(self.config / tenants, "a", encoding="utf-8") as file:
            file.write(f'[[tenant]]\nname = "b"\ntoken_sha256 = "{digest}"\n'
                       'workspace = "/workspace"\n')
        expect(request(port, "POST", "/mcp", READ, SECOND_TOKEN)[0] == 401, "b before")
        run(*podman("exec", name, "sh", "-c", "kill -HUP 1"))
        deadline = time.monotonic() + SETTLE_S
        while request(port, "POST", "/mcp", READ, SECOND_TOKEN)[0] != 200:
            expect(time.monotonic() < deadline, "the reloaded tenant is not served")
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def request(port: int, method: str, path: str, body: dict[str, Any] | None = None,
            token: str = TOKEN) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {} if body is None else {
            "content-type": "application/json", "accept": "application/json",
            "authorization": f"Bearer {token}", "mcp-method": "tools/call",
            "mcp-name": "read_file", "mcp-protocol-version": "2026-07-28"}
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_for(port: int, path: str, good: Any) -> tuple[int, bytes]:
    deadline = time.monotonic() + SETTLE_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = request(port, "GET", path)
            if good(*last):
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise Failed(f"{path} never answered as expected: {last!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-image", action="store_true", help="leave the image built")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS),
                        help="run only this variant (repeatable)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: podman's rootful storage and the test's chowns need it")
    ensure_tools()
    base_image()
    build_image()
    failed = []
    try:
        for name in args.variant or VARIANTS:
            with tempfile.TemporaryDirectory(prefix="corral-ct-") as top:
                no_unshare = Path(top) / "seccomp-no-unshare.json"
                profile = json.loads((REPO / "deploy" / "seccomp.json").read_text())
                for rule in profile["syscalls"]:
                    rule["names"] = [n for n in rule["names"] if n not in NAMESPACE_CALLS]
                no_unshare.write_text(json.dumps(profile))
                options = [option.format(no_unshare=no_unshare) for option in VARIANTS[name]]
                say(f"\n== {name}: podman run {' '.join(options)}")
                (Path(top) / "run").mkdir()
                try:
                    say(Variant(name, options, Path(top) / "run").check().rstrip())
                    say(f"-- {name}: every check holds")
                except Failed as exc:
                    failed.append(name)
                    say(f"-- {name}: FAILED: {exc}")
    finally:
        if not args.keep_image:
            run(*podman("rmi", "--force", IMAGE), check=False)
        # what rebuilds left untagged (the build stage, older images): corral's only
        run(*podman("image", "prune", "--force", "--filter",
                    "label=org.opencontainers.image.title=corral"), check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
