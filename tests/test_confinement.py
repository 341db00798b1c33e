"""Issue 18: the confinement holds on a real runner. Each break of the issue, tried as an attacker
would: as an unprivileged user, with kernelpro installed as the workflow installs it (not editable,
in a virtual environment that user owns and so could write), by the real evaluator on the CPU.

The attacks are in tests/fixtures/confinement/scenario.py, run as that user. As root (CI), the test
makes the user (useradd) and runs the scenario under it with setpriv; as any other user, it runs them
as itself. Each test fails on the code before the confinement (the fix's commit says which break).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCENARIO = Path(__file__).parent / "fixtures" / "confinement" / "scenario.py"
USER = "kernelpro-jail"
CANARY = "sk-canary-issue18-Zq7x"


@dataclass(frozen=True)
class Jail:
    """An unprivileged user with its own non-editable kernelpro installation."""

    prefix: tuple[str, ...]
    """The command prefix that runs a process as the user (empty: this process is the user)."""
    python: str
    """The user's virtual environment's interpreter."""
    root: Path
    """A folder the user owns (its HOME, its venv, its scratch)."""
    uid: int
    """The user's uid."""

    def run(self, case: str, **arg: object) -> dict[str, object]:
        scratch = Path(tempfile.mkdtemp(prefix=f"{case}-", dir=self.root / "scratch"))
        self._own(scratch)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root / "home"), "LANG": "C.UTF-8",
               "KERNELPRO_LLM_API_KEY": CANARY}
        doc = json.dumps({"dir": str(scratch), "canary": CANARY, **arg})
        # A shell that stays alive beside kernelpro with the key in its environment, as a workflow
        # step's shell does.
        cmd = [*self.prefix, "/bin/sh", "-c", 'cd "$1" && "$2" "$3" "$4" "$5"; exit $?', "sh", str(scratch),
               self.python, str(SCENARIO), case, doc]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        assert p.returncode == 0 and lines, f"scenario {case} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        result = json.loads(lines[-1].removeprefix("RESULT "))
        assert str(self.root) in str(result["kernelpro_from"]), result["kernelpro_from"]  # the user's own install
        return dict(result)

    def _own(self, path: Path) -> None:
        if self.prefix:
            subprocess.run(["chown", "-R", f"{self.uid}:{self.uid}", str(path)], check=True)


def _as_user_prefix() -> tuple[tuple[str, ...], int]:
    if os.geteuid() != 0:
        return (), os.geteuid()
    if shutil.which("setpriv") is None or shutil.which("useradd") is None:
        pytest.skip("running as root without setpriv/useradd (util-linux, passwd): cannot make an unprivileged user")
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", USER],
                       check=True, capture_output=True)
        pw = pwd.getpwnam(USER)
    return ("setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--"), pw.pw_uid


def _user_python(prefix: tuple[str, ...]) -> str:
    """An interpreter of this version the user can run (a root-only pyenv is not one)."""
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    for py in (os.path.realpath(sys._base_executable), shutil.which(f"python{v}"), f"/usr/bin/python{v}"):  # type: ignore[attr-defined]
        # Through a shell, as the scenarios start it (setpriv itself may resolve the path before it drops rights).
        probe = [*prefix, "/bin/sh", "-c", '"$0" -c "import encodings"', py or "/nonexistent"]
        if py and os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
            return py
    pytest.skip(f"no Python {v} interpreter the unprivileged user may run")


@pytest.fixture(scope="module")
def jail() -> Iterator[Jail]:
    prefix, uid = _as_user_prefix()
    base = Path(tempfile.mkdtemp(prefix="kernelpro-jail-", dir="/tmp"))
    base.chmod(0o755)
    try:
        py = _user_python(prefix)
        for d in ("home", "scratch", "src"):
            (base / d).mkdir()
        # A copy of the source (the build writes into it), installed as a wheel would be: files in
        # the user's own site-packages, writable by that user. torch and the other dependencies
        # come from this interpreter's site-packages, read-only to the user (a .pth line).
        src = base / "src" / "kernelpro"
        shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", ".cache", "build", "*.egg-info",
                                                                  "__pycache__", "tests", "benchmarks"))
        subprocess.run([py, "-I", "-m", "venv", "--without-pip", str(base / "venv")], check=True)
        site = next((base / "venv" / "lib").glob("python*/site-packages"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(src)], check=True, capture_output=True)
        deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
        (site / "zz_dependencies.pth").write_text("\n".join(deps) + "\n")
        if prefix:
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)
        yield Jail(prefix, str(base / "venv" / "bin" / "python"), base, uid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _namespaces(result: dict[str, object]) -> bool:
    sandbox = result.get("sandbox") or {}
    return str(sandbox.get("network", "")).startswith("isolated") if isinstance(sandbox, dict) else False


def _refused(result: dict[str, object]) -> bool:
    """kernelpro refused to run candidates on this machine even to the scenario's opt-in: there is no
    Landlock, so no file rule to try (test_break4_fails_closed... shows the refusal itself)."""
    if result.get("status") == "REFUSED":
        pytest.skip(f"no Landlock for the unprivileged user here: kernelpro refuses to run candidates ({result['log']})")
    return False


# --------------------------------------------------------------------------- break 1


def test_break1_a_kernel_file_that_is_a_symlink_to_environ_is_refused(jail: Jail) -> None:
    r = jail.run("symlink_kernel")
    assert not r["leaked"], "the orchestrator's environment (the LLM key) was read into the solution"
    assert not r["read"] and "symbolic link" in str(r["error"]), r


# --------------------------------------------------------------------------- break 2


def test_break2_a_candidate_cannot_edit_kernelpros_installation(jail: Jail) -> None:
    r = jail.run("edit_installation")
    assert not _refused(r), r["log"]
    assert not r["modified"], f"the candidate appended code to {r['installed_at']}"
    assert "REFUSED" in str(r["log"]) or r["status"] == "PASSED", r["log"]
    assert "Landlock" in str(r["sandbox"]["confinement"])  # type: ignore[index]


# --------------------------------------------------------------------------- break 3


def test_break3_a_candidate_cannot_write_the_checkouts_git_config(jail: Jail) -> None:
    checkout = Path(tempfile.mkdtemp(prefix="checkout-", dir=jail.root / "scratch"))
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    jail._own(checkout)
    r = jail.run("git_config", checkout=str(checkout))
    assert not _refused(r), r["log"]
    assert not r["modified"], "the candidate wrote core.fsmonitor into the checkout's .git/config"
    assert "fsmonitor" not in (checkout / ".git" / "config").read_text()


# --------------------------------------------------------------------------- break 4


def test_break4_without_namespaces_no_secret_is_read_and_no_daemon_survives(jail: Jail) -> None:
    r = jail.run("no_namespaces")
    for way in ("fresh", "forked"):
        got = r[way]
        assert isinstance(got, dict)
        if got["status"] == "REFUSED":  # this kernel has no Landlock signal scoping: fail closed, also fine
            assert "candidates were not run" in got["log"]
            continue
        assert not got["stolen"] and CANARY not in got["log"], f"{way}: the key was read from /proc/PID/environ"
        assert got["status"] == "PASSED", got["log"]  # it ran its attack, found nothing, and computed
        assert got["daemons_left"] == 0, f"{way}: a setsid daemon of the candidate outlived it"


def test_break4_fails_closed_without_confinement_unless_the_operator_opts_in(jail: Jail) -> None:
    r = jail.run("fail_closed")
    default, opted = r["default"], r["opted_in"]
    assert isinstance(default, dict) and isinstance(opted, dict)
    assert not default["ran"], "candidates ran with no confinement and no opt-in"
    assert "--allow-unconfined" in default["error"] and "Landlock" in default["error"]
    assert opted["ran"] and str(opted["confinement"]).startswith("UNCONFINED (operator opted in)"), opted


# --------------------------------------------------------------------------- break 5


def test_break5_the_fresh_proc_cannot_be_unmounted(jail: Jail) -> None:
    r = jail.run("umount_proc")
    for way in ("fresh", "forked"):
        got = r[way]
        assert isinstance(got, dict)
        if not _namespaces(got):
            pytest.skip(f"the unprivileged user gets no namespaces here ({got['sandbox']}): no /proc of its own")
        said = re.search(r"UMOUNT rc=(-?\d+) errno=(\d+) PIDS=(\d+)", str(got["log"]))
        assert said, got["log"]
        assert said[1] == "-1", f"{way}: umount2(/proc) succeeded and showed {said[3]} processes"
        assert int(said[3]) <= 3, f"{way}: the candidate saw {said[3]} processes"


# --------------------------------------------------------------------------- break 6


def test_break6_reference_outputs_of_another_run_are_not_readable(jail: Jail) -> None:
    planted = Path(tempfile.mkdtemp(prefix="kernelpro-cand-planted-", dir="/tmp"))
    try:
        planted.rmdir()
        r = jail.run("reference_files", planted=str(planted))
        assert not _refused(r), r["log"]
        assert r["status"] == "RUNTIME_ERROR" and "NOTHING seen=[]" in str(r["log"]), r["log"]
        assert not r["foreign_files"], "the candidate wrote into another run's directory"
    finally:
        shutil.rmtree(planted, ignore_errors=True)


# --------------------------------------------------------------------------- break 7


def test_break7_a_binary_tool_on_a_candidates_file_gets_no_secret_and_writes_nothing(jail: Jail) -> None:
    r = jail.run("tool")
    assert not r["leaked"], f"the tool saw the key: {r['said']}"
    assert not r["modified"], "the tool appended to kernelpro's installation"


def test_the_policy_never_opens_tmp_home_or_the_checkout() -> None:
    """What a candidate may read: the system, the Python installation, kernelpro; never /tmp as a
    whole, HOME or the current directory (the checkout, in the workflow)."""
    from kernelpro.runner import confinement

    work = Path(tempfile.mkdtemp(prefix="kernelpro-cand-"))
    try:
        p = confinement.policy([work])
        assert p.writable == (str(work),) or p.writable[0] == str(work)
        for forbidden in ("/tmp", "/", os.path.expanduser("~"), "/home", "/root", "/var"):
            assert forbidden not in p.readable and forbidden not in p.writable
        assert os.getcwd() not in p.readable or any(os.getcwd() == q for q in sys.path if q)
    finally:
        shutil.rmtree(work)


def test_break1_a_head_config_that_is_a_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """No .kernelpro.yml on the base branch: the CLI falls back to the head's, which must not be a
    link to the orchestrator's environment either."""
    from kernelpro.cli import main

    monkeypatch.setenv("KERNELPRO_LLM_API_KEY", CANARY)
    repo = tmp_path / "repo"
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@b", "-C", str(repo)]
    repo.mkdir()
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README").write_text("base\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (repo / ".kernelpro.yml").symlink_to("/proc/self/environ")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "head"], check=True)
    rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    assert rc != 0 and "symbolic link" in said.err, (rc, said.err[-500:])
    assert CANARY not in said.out + said.err


# --------------------------------------------------------------------------- issue 18, second review


def test_review1_a_swapped_ncu_log_is_neither_read_nor_fatal(jail: Jail) -> None:
    r = jail.run("ncu_log_link")
    for name in ("key", "environ"):
        got = r[name]
        assert isinstance(got, dict)
        if "refused" in got:
            pytest.skip(f"kernelpro refuses to run candidates for this user here: {got['refused']}")
        assert "raised" not in got, f"{name}: the profile aborted the run: {got['raised']}"
        assert not got["leaked"], f"{name}: the file behind the candidate's link reached the profile's notes"
        assert "SWAPPED /" not in str(got["notes"]), f"{name}: the harness could replace ncu's log: {got['notes']}"


def test_review1_2_an_energy_arm_is_confined_and_its_stderr_read_from_our_own_descriptor(jail: Jail) -> None:
    r = jail.run("energy_arm")
    if "candidates were not run" in str(r["raised"]):
        pytest.skip(f"kernelpro refuses to run candidates for this user here: {r['raised']}")
    assert not r["raised"], r["raised"]
    assert not r["leaked"], "the arm's stderr.txt, a link to the runner's SSH key, was read into the failure"
    assert not r["host_got"], f"the arm sent UDP to the host: {r['host_got']}"
    assert "PROCS" in str(r["said"]), r["said"]  # what it wrote to its stderr is still what we show
    procs = re.search(r"PROCS (\d+)", str(r["said"]))
    if procs and str(r["network"]).startswith("isolated"):
        assert int(procs[1]) <= 3, f"the arm saw {procs[1]} processes: no pid namespace"


def test_review2_3_no_udp_or_named_unix_socket_reaches_the_host(jail: Jail) -> None:
    r = jail.run("sockets")
    for way in ("namespaces", "namespaces_forked", "fresh", "forked"):
        got = r[way]
        assert isinstance(got, dict)
        assert not _refused(got), got["log"]
        assert not got["host_got"], f"{way}: a host service got {got['host_got']}: {got['log'][-600:]}"
        said = re.search(r"RuntimeError: NET (.*)", str(got["log"]))
        assert said, got["log"]
        assert "udp sent" not in said[1] and "unix: HELLO" not in said[1], f"{way}: {said[1]}"
        assert "socketpair x" in said[1], f"{way}: socketpair must stay usable: {said[1]}"
        assert "seccomp (no sockets but socketpair" in str(got["sandbox"]["confinement"]), got["sandbox"]


def test_review4_5_no_chmod_utime_xattr_on_the_runners_files_and_no_dev_shm(jail: Jail) -> None:
    r = jail.run("metadata")
    for way in ("namespaces", "forked"):
        got = r[way]
        assert isinstance(got, dict)
        assert not _refused(got), got["log"]
        assert "META" in str(got["log"]), got["log"]
        assert not got["changed"], f"{way}: modes or times changed: {got['before']} -> {got['after']}"
        assert "user.kp" not in got["xattrs"], f"{way}: the candidate set an xattr on the installation"
        assert not got["shm_read"], f"{way}: the candidate read a file of the runner's user in /dev/shm"


def test_the_seccomp_filter_refuses_sockets_and_makes_metadata_calls_no_ops(tmp_path: Path) -> None:
    from kernelpro.runner import confinement

    if confinement.seccomp_available() is not None:
        pytest.skip(f"no seccomp filter here: {confinement.seccomp_available()}")
    f = tmp_path / "f"
    f.write_text("x")
    f.chmod(0o644)
    code = f"""
import os, socket, sys
sys.path[:0] = {sys.path!r}
from kernelpro.runner import confinement
assert confinement.seccomp_filter()
said = []
for fam in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX, socket.AF_NETLINK, socket.AF_PACKET, 40):
    try:
        socket.socket(fam, socket.SOCK_DGRAM)
        said.append(f"{{fam}} open")
    except OSError as e:
        said.append(f"{{fam}} {{e.errno}}")
a, b = socket.socketpair()
os.chmod({str(f)!r}, 0o777)
try:
    os.utime({str(f)!r}, (0, 0))
    said.append("utime done")
except PermissionError:
    said.append("utime refused")
os.chown({str(f)!r}, 12345, 12345)
marker = {str(f)!r} + ".built"
import pathlib
pathlib.Path(marker).touch()  # a refused utime still lets touch create a file (a no-op one did not)
said.append("touched" if os.path.exists(marker) else "not-touched")
print(" ".join(said))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["2", "13", "10", "13", "1", "13", "16", "13", "17", "13", "40", "13",
                                "utime", "refused", "touched"], p.stdout
    st = f.stat()
    assert oct(st.st_mode) == "0o100644" and st.st_mtime > 0 and st.st_uid == os.getuid()
    desc = confinement.available(True).description
    assert "seccomp (no sockets but socketpair, no System V IPC, no connect, no io_uring, no chmod/chown/utime/xattr)" in desc


@pytest.mark.parametrize(("unix", "connect", "expected"), [
    ("refuse", True, "unix-stream:EACCES unix-dgram:EACCES inet:EACCES socketpair:ok"),
    ("stream", True, "unix-stream:ok connect:ECONNREFUSED unix-dgram:EACCES inet:EACCES socketpair:ok"),
    ("stream", False, "unix-stream:ok connect:ok unix-dgram:EACCES inet:EACCES socketpair:ok"),
    ("any", True, "unix-stream:ok connect:ECONNREFUSED unix-dgram:ok inet:EACCES socketpair:ok"),
])
def test_the_filters_unix_socket_settings_do_what_they_say(tmp_path: Path, unix: str, connect: bool, expected: str) -> None:
    """The settings a GPU host needs (CUDA's initialisation fails when socket(AF_UNIX) itself is
    refused, session 16): unix stream sockets only, and no connect() to anything, so no named socket
    of the host is reachable even where /run could not be mounted empty."""
    from kernelpro.runner import confinement

    if confinement.seccomp_available() is not None:
        pytest.skip(f"no seccomp filter here: {confinement.seccomp_available()}")
    sock = tmp_path / "host.sock"
    code = f"""
import errno, os, socket, sys
sys.path[:0] = {sys.path!r}
from kernelpro.runner import confinement as c
c.UNIX_SOCKETS, c.REFUSE_CONNECT = {unix!r}, {connect!r}
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind({str(sock)!r})
srv.listen()
assert c.seccomp_filter()
out = []
for name, fam, typ in (("unix-stream", socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC),
                       ("unix-dgram", socket.AF_UNIX, socket.SOCK_DGRAM), ("inet", socket.AF_INET, socket.SOCK_STREAM)):
    try:
        s = socket.socket(fam, typ)
        out.append(name + ":ok")
    except OSError as e:
        out.append(name + ":" + errno.errorcode[e.errno])
        continue
    if name == "unix-stream":
        try:
            s.connect({str(sock)!r})
            out.append("connect:ok")
        except OSError as e:
            out.append("connect:" + errno.errorcode[e.errno])
socket.socketpair()
out.append("socketpair:ok")
print(" ".join(out))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == expected


def test_the_policy_hides_dev_shm_and_gives_tool_only_folders_to_the_profilers_layer(tmp_path: Path) -> None:
    from kernelpro.runner import confinement

    work, log = tmp_path / "work", tmp_path / "ncu-log"
    confinement.tool_only(log)
    p = confinement.policy([work, log])
    assert str(work) in p.writable and str(log) not in p.writable and p.tool_writable == (str(log),)
    assert "/dev" not in p.readable and "/dev/shm" not in p.readable and "/dev/mqueue" not in p.readable
    assert "/dev/null" in p.readable
    assert confinement.Policy.from_json(p.to_json()) == p


def test_what_a_child_could_touch_is_read_and_written_without_following_its_links(tmp_path: Path) -> None:
    """ncu's log read back, the profiler's cache merge into a live standby's cache, and the standby's
    heartbeat: a link a child put there is never followed (the runner's key stays unread and unwritten)."""
    from kernelpro.runner.profiler import merge_cache, read_log
    from kernelpro.runner.standby import NcuStandby

    secret = tmp_path / "id_ed25519"
    secret.write_text("KEY")
    (tmp_path / "log").symlink_to(secret)
    with pytest.raises(OSError):
        read_log(tmp_path / "log")
    assert read_log(tmp_path / "absent") == ""
    # The candidate's cache holds a file under "ab"; the standby made "ab" in its own cache a link to ~/.ssh.
    src, dst, ssh = tmp_path / "src", tmp_path / "dst", tmp_path / "ssh"
    (src / "ab").mkdir(parents=True)
    (src / "ab" / "authorized_keys").write_text("ssh-ed25519 ATTACKER")
    (src / "k.cubin").write_text("cubin")
    (src / "link.cubin").symlink_to(secret)
    dst.mkdir()
    ssh.mkdir()
    (dst / "ab").symlink_to(ssh)
    assert merge_cache(src, dst) == 1 and (dst / "k.cubin").read_text() == "cubin"
    assert not (ssh / "authorized_keys").exists() and not (dst / "link.cubin").exists()
    # The heartbeat: "alive" and "go.tmp" made links to the runner's files.
    work = tmp_path / "work"
    work.mkdir()
    (work / "go.tmp").symlink_to(secret)
    standby = NcuStandby.__new__(NcuStandby)
    standby._request = {"mode": "profile"}
    standby._beat(work)
    assert secret.read_text() == "KEY" and json.loads((work / "go.json").read_text()) == {"mode": "profile"}
    (work / "alive").unlink()
    (work / "alive").symlink_to(tmp_path / "created-through-a-link")
    with pytest.raises(OSError):
        standby._beat(work)
    assert not (tmp_path / "created-through-a-link").exists()


def test_the_unix_socket_setting_is_chosen_where_the_policy_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under Landlock /dev cannot be listed: a confined harness that looked for the GPU itself found
    none, refused CUDA its unix socket, and every GPU candidate of the tier failed with error 304
    (H200, session 17). The setting travels in the policy, chosen by the parent that sees /dev."""
    import glob as globmod

    from kernelpro.runner import confinement

    if confinement.seccomp_available() is not None or confinement.landlock_abi() < 1:
        pytest.skip("needs Landlock and the seccomp filter")
    real = globmod.glob
    monkeypatch.setattr(confinement.glob, "glob",
                        lambda pat, *a, **k: ["/dev/nvidia0"] if pat.startswith("/dev/nvidia") else real(pat, *a, **k))
    pol = confinement.policy([tmp_path / "w"])
    assert pol.unix == "any" and confinement.Policy.from_json(pol.to_json()) == pol
    code = f"""
import socket, sys
sys.path[:0] = {sys.path!r}
from kernelpro.runner import confinement as c
c.restrict(c.Policy.from_json(sys.argv[1]))
print("here:", c.unix_sockets())
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
print("unix socket ok")
"""
    p = subprocess.run([sys.executable, "-c", code, pol.to_json()], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["here: refuse", "unix socket ok"], p.stdout


def test_a_gpu_host_gets_the_whole_confinement_with_the_unix_sockets_cuda_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H200 CUDA's initialisation failed (error 304) when socket(AF_UNIX) was refused, and when
    only stream ones were allowed; the /dev rules and the empty mounts did not stop it (session 16,
    benchmarks/harden_probe.py). So a host with an NVIDIA device gets all of it, unix sockets of any
    type allowed and connect() refused; a host without one refuses unix sockets too."""
    import glob as globmod

    from kernelpro.runner import confinement

    real = globmod.glob
    assert confinement.unix_sockets() == "refuse" or real("/dev/nvidia[0-9]*")
    monkeypatch.setattr(confinement.glob, "glob",
                        lambda pat, *a, **k: ["/dev/nvidia0"] if pat.startswith("/dev/nvidia") else real(pat, *a, **k))
    assert confinement.unix_sockets() == "any" and confinement.REFUSE_CONNECT
    assert "/dev" not in confinement.policy([]).readable and "/dev/shm" not in confinement.policy([]).readable
    if confinement.seccomp_available() is None:
        assert confinement.seccomp_description() == ("seccomp (no sockets but unix ones and socketpair, no connect, "
                                                     "no io_uring, no chmod/chown/utime/xattr)")


def test_the_harden_probe_runs_its_variants_on_the_cpu(tmp_path: Path) -> None:
    """benchmarks/harden_probe.py (h200.sh step harden) confines one child per variant by patching
    the module as the variant says; its patched filter broke when ``restrict`` began passing the
    policy's unix setting (session 17): a probe that fails on the GPU machine costs device time."""
    from kernelpro.runner import confinement

    if confinement.landlock_abi() < 1:
        pytest.skip("needs Landlock")
    probe = Path(__file__).resolve().parents[1] / "benchmarks" / "harden_probe.py"
    p = subprocess.run([sys.executable, str(probe), "--out", str(tmp_path), "--device", "cpu",
                        "--only", "none,all,all-unix-any-noconnect"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((tmp_path / "harden.json").read_text())["rows"]
    assert {r["variant"]: r["ok"] for r in rows} == {"none": True, "all": True, "all-unix-any-noconnect": True}, rows


def test_the_harden_probes_timing_mode_times_every_variant_and_logs_the_calls_on_the_cpu(tmp_path: Path) -> None:
    """``harden_probe.py --timing`` (h200.sh step harden-timing, session 21): every variant's child
    confines itself and reports its stages; where a C compiler exists, calls_shim.c is built and the
    two runs under it log their calls (here, without CUDA, the unshare's fork at least)."""
    import shutil

    from kernelpro.runner import confinement

    if confinement.landlock_abi() < 1:
        pytest.skip("needs Landlock")
    probe = Path(__file__).resolve().parents[1] / "benchmarks" / "harden_probe.py"
    p = subprocess.run([sys.executable, str(probe), "--out", str(tmp_path), "--device", "cpu", "--timing", "1"],
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "timing.json").read_text())
    rows = {r["variant"]: r for r in doc["rows"]}
    assert set(rows) == {"none", "landlock", "seccomp", "seccomp-connect-ok", "full", "full-connect-ok"}
    assert all("error" not in r and r["exit"] > 0 and r["confined"] >= 0 for r in rows.values()), rows
    assert "| full |" in p.stdout
    if shutil.which("cc") or shutil.which("gcc"):
        assert set(doc["shim"]) == {"none", "full"} and all(r["calls"] for r in doc["shim"].values())


# --------------------------------------------------------------------------- review 6 (red team, session 27)


def _chain_links(marker: str) -> list[tuple[int, int]]:
    """(pid, process group) of the live processes whose command line holds ``marker``."""
    out = []
    for c in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in c.read_bytes():
                stat = (c.parent / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                if fields[0] != "Z":
                    out.append((int(c.parent.name), int(fields[2])))
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_review6_a_process_chain_dies_with_its_evaluation_without_a_pid_namespace() -> None:
    """Without a pid namespace the supervisor is what ends a candidate's processes. It killed its direct
    children one pass at a time, and a chain that forks a new last link whenever one above it dies kept
    its depth, outlived the deadline and was alive through the next candidate's evaluation (the
    fixture's docstring says how). The supervisor now stops the whole tree before it kills it."""
    import threading
    import time
    import uuid

    from test_adversarial import LOADS, SWIGLU, candidate

    from kernelpro.runner import confinement
    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance

    if confinement.landlock_abi() < 6 or shutil.which("gcc") is None:
        pytest.skip("needs Landlock ABI >= 6 (the confinement kernelpro accepts without namespaces) and gcc")
    marker = f"kp-chain-{uuid.uuid4().hex[:8]}"
    source = (Path(__file__).parent / "fixtures" / "confinement" / "chain.py").read_text().replace(
        "kp-walker-MARKER", marker)
    honest = "import torch\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n"
    s = EvalSettings(device="cpu", trials=2, timeout_s=10, memory_limit_mb=4096, isolate_network=False, fork_server=True)
    try:
        first = evaluate(SWIGLU, candidate("chain", source), LOADS, Tolerance(), s)
        assert first.environment["sandbox"]["network"].startswith("network isolation unavailable"), first.environment
        left = _chain_links(marker)
        seen: list[int] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen.append(len(_chain_links(marker)))
                time.sleep(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        after = evaluate(SWIGLU, candidate("next", honest), LOADS, Tolerance(), s)
        done.set()
        watcher.join()
        assert after.passed, after.log
        assert not left and not any(seen), (f"{len(left)} processes of the candidate outlived it ({first.status}); "
                                            f"up to {max(seen, default=0)} during the next evaluation")
        assert first.passed, (first.status, first.log[-500:])  # it computes right: only its processes were wrong
    finally:
        for _ in range(50):  # never leave the chain behind, whatever failed
            got = _chain_links(marker)
            if not got:
                break
            for pgid in {g for _, g in got if g > 1}:
                with contextlib.suppress(OSError):
                    os.killpg(pgid, signal.SIGKILL)
            time.sleep(0.1)


def test_review6_the_runners_registration_key_under_opt_is_not_readable() -> None:
    """Self-hosted runners are commonly installed in /opt/actions-runner, and /opt was readable to every
    candidate: one read the runner's key, its credentials and the results folder into its error
    message, with namespaces and without. /opt is no longer readable as a whole."""
    import secrets

    from test_adversarial import LOADS, SWIGLU, candidate

    from kernelpro.runner import confinement
    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance

    assert "/opt" not in confinement.SYSTEM_READABLE
    root = Path("/opt") / f"kp-actions-runner-{secrets.token_hex(4)}"
    try:
        root.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a runner's folder under /opt here: {e}")
    try:
        key = secrets.token_hex(24)
        (root / ".credentials_rsaparams").write_text(json.dumps({"d": key}))
        (root / ".runner").write_text('{"agentName": "gpu-1"}')
        (root / "_work" / "_temp" / "out").mkdir(parents=True)
        (root / "_work" / "_temp" / "out" / "summary.json").write_text('{"targets": []}')
        source = (Path(__file__).parent / "fixtures" / "confinement" / "runner_key.py").read_text().replace(
            '"/opt/actions-runner"', repr(str(root)))
        for isolate in (True, False):
            s = EvalSettings(device="cpu", trials=1, timeout_s=60, memory_limit_mb=4096, isolate_network=isolate)
            out = evaluate(SWIGLU, candidate("key", source), LOADS, Tolerance(), s)
            assert "LOOT" in out.log, out.log[-800:]
            assert key not in out.log and "targets" not in out.log, out.log[-800:]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_review6_a_runner_installed_under_a_readable_folder_is_refused(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the runner's own folder lies under a folder every candidate reads (a runner in /usr/local,
    say), no candidate runs: the error names the folder, what it holds, and the fix."""
    from kernelpro.runner import confinement
    from kernelpro.runner.environment import SandboxError

    root = tmp_path / "actions-runner"
    (root / "_work" / "_temp").mkdir(parents=True)
    (root / ".runner").write_text("{}")
    monkeypatch.setenv("RUNNER_TEMP", str(root / "_work" / "_temp"))
    assert confinement.runner_root() == str(root)
    if not confinement.available(True).sufficient:
        pytest.skip("no Landlock here: every candidate is refused anyway")
    confinement.required(pid_namespace=True)  # the runner's folder lies under nothing readable: it runs
    monkeypatch.setattr(confinement, "SYSTEM_READABLE", (*confinement.SYSTEM_READABLE, str(tmp_path)))
    with pytest.raises(SandboxError) as e:
        confinement.required(pid_namespace=True)
    said = str(e.value)
    assert f"the Actions runner's own folder {root}" in said and f"lies under {tmp_path}" in said, said
    assert "registration key" in said and "Fix: install the runner outside" in said, said
    monkeypatch.delenv("RUNNER_TEMP")
    for var in ("RUNNER_WORKSPACE", "GITHUB_WORKSPACE", "RUNNER_TOOL_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert confinement.runner_root() is None


def test_review6_no_disk_and_no_kernel_memory_is_readable() -> None:
    """Every entry of /dev was readable: a candidate of a root runner without a user namespace (root
    then) could read the disk under every file. Block devices and /dev/mem, kmem, port and kmsg are not."""
    import stat as st

    from kernelpro.runner import confinement

    work = Path(tempfile.mkdtemp(prefix="kernelpro-cand-"))
    try:
        readable = confinement.policy([work]).readable
    finally:
        shutil.rmtree(work)
    blocks = [p for p in readable if p.startswith("/dev/") and st.S_ISBLK(os.stat(p).st_mode)]
    assert not blocks, blocks
    assert not {"/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg"} & set(readable)
    assert "/dev/null" in readable and "/dev/urandom" in readable
    if not any(st.S_ISBLK(e.stat(follow_symlinks=False).st_mode) for e in os.scandir("/dev") if not e.is_symlink()):
        pytest.skip("this machine has no block device in /dev to leave out")


def test_review6_a_root_candidate_without_a_user_namespace_holds_none_of_the_dropped_capabilities() -> None:
    """As root without a user namespace, the harness dropped the dangerous capabilities only from the
    bounding set, which limits what it executes; the candidate runs in the harness's own process, which
    kept CAP_SYS_MODULE (a kernel module undoes every confinement), CAP_SYS_RAWIO and the rest."""
    from test_adversarial import LOADS, SWIGLU, candidate

    from kernelpro.runner import confinement
    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance

    if os.geteuid() != 0 or not confinement.available(False).sufficient:
        pytest.skip("needs root and the confinement kernelpro accepts without namespaces (Landlock ABI >= 6)")
    source = ("def run(a, b):\n"
              "    caps = {k: v for k, v in (ln.split(':\\t') for ln in open('/proc/self/status').read().splitlines()"
              " if ln.startswith('Cap'))}\n"
              "    raise RuntimeError('CAPS ' + repr(caps))\n")
    for fork in (True, False):  # forked from the fork server (which kept all of root's) and a fresh interpreter
        out = evaluate(SWIGLU, candidate("caps", source), LOADS, Tolerance(),
                       EvalSettings(device="cpu", trials=1, timeout_s=60, isolate_network=False, fork_server=fork))
        line = [ln for ln in out.log.splitlines() if "CAPS {" in ln][-1]
        caps = eval(line[line.index("{"):line.rindex("}") + 1])  # noqa: S307 - a dict repr this test's own candidate printed
        for kind in ("CapEff", "CapPrm", "CapBnd"):
            held = int(caps[kind], 16)
            kept = [c for c in confinement._DROPPED_CAPS if held >> c & 1]
            assert not kept, f"fork server {fork}: {kind} still holds capabilities {kept}"
