"""Confinement of ``promoter run``'s command: bubblewrap, limits, and the one way out.

This module owns how the sandbox's command is started (protocol: runs#sandbox-boundary,
runs#confinement): the bubblewrap command line (namespaces, the read-only host with its
hidden, fresh and writable places, checked by ``hidden.py``), the environment built from
scratch, the limits set on the process that execs bwrap (``_LIMITS_SHIM``; a pids cgroup
where one is writable, which promoter places it in while its interpreter starts,
``procs_limit`` saying which ran), the daemon reached through
``Relay`` (``relay.py``) and ``sandbox_entry.py`` when there is no network, the end of the
whole tree on timeout or Ctrl-C, and ``disarm`` afterwards. ``--unconfined`` runs the
command as the person, in its own process group.

Fault point: ``pids_cgroup_joined`` (the shim's process is in its pids cgroup, not yet
let go on).

Not here: disk quotas, CPU limits, seccomp filters, or any judgement of what the command
wrote (the builder and the host do that).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

from promoter import faults
from promoter.errors import ConfigError, ConfinementUnavailable, PathUnsafe
from promoter.executor import layers
from promoter.executor.hidden import check_hidden
from promoter.executor.layers import Overlay
from promoter.executor.pane import Pane
from promoter.executor.relay import Relay
from promoter.executor.shims import FOLD
from promoter.fs.own_entry import Made
from promoter.fs.own_tree import disarm_tree
from promoter.lazy_log import LazyLogger

log = LazyLogger("promoter.run")

__all__ = [
    "BWRAP_ENV",
    "STEP_ENV",
    "Limits",
    "Outcome",
    "Prepared",
    "Relay",
    "Sandbox",
    "Stem",
    "TimedOut",
    "bwrap_path",
    "disarm",
    "forget_probe",
    "interpreter_prefix",
    "prepare_confined",
    "probe",
    "probing",
    "run_confined",
    "run_unconfined",
    "sandbox_env",
    "settle_cgroups",
]

BWRAP_ENV = "PROMOTER_BWRAP"  # the bubblewrap binary (default: bwrap on PATH)
REMEDY = "install bubblewrap (apt-get install bubblewrap) or pass --unconfined"
SOCKET_INSIDE = "/run/promoter/daemon.sock"
_KEPT_ENV = ("PATH", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "COLUMNS")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name a shell can export
_LOCALE = ("LANG", "LC_ALL", "LC_CTYPE")  # what an interpreter's start reads of its environment
_PIDS_V1 = Path("/sys/fs/cgroup/pids")
_CGROUP2 = Path("/sys/fs/cgroup/unified")
_ENTRY = Path(__file__).with_name("sandbox_entry.py")
# inside the sandbox: fresh, private tmpfs mounts (nothing of the host's shows there)
_PRIVATE_TMP = "/tmp"  # noqa: S108
_ALWAYS_HIDDEN = ("/tmp", "/var/tmp", "/run", "/var/run")  # noqa: S108
_PRIVATE_WRITABLE = ("/tmp", "/var/tmp")  # noqa: S108

# Run by the host's Python just before bwrap (after the overlay's mount, if any): set the
# limits, wait until promoter has placed this process in the pids cgroup (``_Join``: a
# byte on ``go``; anything else, no exec), exec bwrap.
_LIMITS_SHIM = """\
import os, resource, sys
a, f, n, go = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
resource.setrlimit(resource.RLIMIT_AS, (a, a))
resource.setrlimit(resource.RLIMIT_FSIZE, (f, f))
resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
if go:
    joined = os.read(int(go), 1)
    os.close(int(go))
    if joined != b"1":
        os._exit(125)
os.execv(sys.argv[5], sys.argv[5:])
"""


# Started by ``Stem`` as a confined run begins, before its sandbox is made: the host's
# Python waits, on its pane and in its pids cgroup, for one message on ``msg`` (the
# directory, the environment and the chain of shims ``run_confined`` would start), then
# runs that chain in this interpreter (``shims.FOLD``). No message (the run ended before
# its command): it exits, nothing run. It starts with the locale's variables only, those
# of the command's environment, so what the interpreter adds at its start (a coerced
# ``LC_CTYPE``) is what a shim started with that environment would add.
_STEM = (
    """\
import os, sys
msg = int(sys.argv[1])
os.set_inheritable(msg, False)
data = bytearray()
while chunk := os.read(msg, 65536):
    data += chunk
os.close(msg)
if not data:
    os._exit(0)
fields = bytes(data).split(b"\\0")
count = int(fields[1])
for item in fields[2 : 2 + count]:
    name, _, value = item.partition(b"=")
    os.environb[name] = value
os.chdir(fields[0])
argv = [os.fsdecode(f) for f in fields[2 + count :]]
"""
    + FOLD
    + """\
if is_shim(argv):  # the pane's shim, in this interpreter (``shims.py``)
    run_shim(argv)
os.execvp(argv[0], argv)
"""
)


class TimedOut(Exception):
    """The command ran past its ``--timeout`` and was ended with every process of it: the
    step's failure, which the run names (not an error of promoter's own)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the command did not finish within {seconds:g} s")
        self.seconds = seconds


class Limits(NamedTuple):
    """What the command may use: bytes of address space, processes, bytes per file."""

    memory: int = 8 << 30
    procs: int = 1024
    file_size: int = 4 << 30


class Sandbox(NamedTuple):
    """Where a confined command runs and what it must not see."""

    clone: Path
    home: Path
    hide: Sequence[Path]
    network: bool = False
    limits: Limits = Limits()  # immutable: one for all
    overlay: Overlay | None = None
    """A layered sandbox: ``clone`` is its mount point (``layers.Overlay.wrap``)."""
    workdir: str = ""
    """Where below ``clone`` the command starts ("": ``clone``; ``run.where``, checked)."""


class Outcome(NamedTuple):
    """How the confined command ended: its exit code and what limited its processes."""

    returncode: int
    procs_limit: str  # "cgroup-v1", "cgroup-v2", "rlimit" or "none" (unconfined)


def bwrap_path() -> str:
    """The bubblewrap binary: ``$PROMOTER_BWRAP``, else ``bwrap`` on PATH."""
    return os.environ.get(BWRAP_ENV) or shutil.which("bwrap") or "/usr/bin/bwrap"


_PROBED: set[str] = set()  # bubblewrap binaries that made the namespaces in this process
KEPT_PROBE = "bwrap-probe"  # in the directory ``probing`` is given: a passing probe's conditions
# what the namespaces the probe makes depend on, besides the overlay probe's switches
_NAMESPACE_SWITCHES = tuple(
    f"/proc/sys/user/max_{kind}_namespaces" for kind in ("pid", "ipc", "uts", "cgroup", "net")
)


def probe(bwrap: str) -> None:
    """Refuse with ``confinement_unavailable`` unless bwrap can make the namespaces here
    (once per binary and process: a run probes before its sandbox, then runs confined)."""
    with probing(bwrap) as probed:
        probed()


def _probe_conditions(bwrap: str) -> bytes | None:
    """What a passing probe depends on: the bubblewrap binary (its real path, identity,
    size, times, mode and owner), the user and the user namespace this process is in,
    its seccomp and no-new-privileges state, this boot of the kernel and its switches
    for namespaces; a change in any of them probes again. None: it cannot be read."""
    try:
        real = os.path.realpath(bwrap)
        st = os.stat(real)
        userns = os.stat("/proc/self/ns/user").st_ino
        with open("/proc/self/status", "rb") as handle:
            status = handle.read().decode("ascii", "replace").splitlines()
    except OSError:
        return None
    lines = [
        f"bwrap {real} {st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} "
        f"{st.st_ctime_ns} {st.st_mode:o} {st.st_uid}",
        f"uid {os.getuid()} gid {os.getgid()} userns {userns}",
        *(" ".join(line.split()) for line in status if line.startswith(_STATUS)),
        *layers.switches((*layers._SWITCHES, *_NAMESPACE_SWITCHES)),
    ]
    return ("\n".join(lines) + "\n").encode()


_STATUS = ("Seccomp:", "NoNewPrivs:")


def forget_probe(kept: Path) -> None:
    """The answer kept in ``kept`` forgotten: the next run probes again (a confined
    command that failed may have failed for bubblewrap's own reasons)."""
    if layers.read_kept(str(kept), KEPT_PROBE):
        layers.keep(str(kept), KEPT_PROBE, b"")


@contextlib.contextmanager
def probing(bwrap: str, kept: Path | None = None) -> Iterator[Callable[[], None]]:
    """``probe`` in the background: a missing binary is refused at once, the namespaces
    are tried while the caller goes on, and calling what this yields waits for the answer
    (the refusal ``probe`` raises). A probe not waited for is ended on the way out.

    ``kept``: a directory of promoter's own where a passing answer is kept with its
    conditions (``_probe_conditions``) for later processes, which take it instead of
    probing while every condition is the same; a refusal is never kept."""
    if not os.access(bwrap, os.X_OK):
        raise ConfinementUnavailable(f"no bubblewrap at {bwrap}: {REMEDY}", bwrap=bwrap)
    conditions = None if kept is None or bwrap in _PROBED else _probe_conditions(bwrap)
    where = "" if kept is None else str(kept)
    if conditions is not None and layers.read_kept(where, KEPT_PROBE) == conditions + b"yes\n":
        _PROBED.add(bwrap)
    if bwrap in _PROBED:
        yield lambda: None
        return
    argv = [bwrap, *_NAMESPACES, "--unshare-net", "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as exc:
        raise ConfinementUnavailable(f"bubblewrap does not start: {exc}; {REMEDY}") from exc

    def answer() -> None:
        if bwrap in _PROBED:
            return
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired as exc:
            raise ConfinementUnavailable(f"bubblewrap does not start: {exc}; {REMEDY}") from exc
        if process.returncode != 0:
            reason = err.decode("utf-8", "replace").strip()[-300:]
            raise ConfinementUnavailable(
                f"bubblewrap cannot make namespaces here ({reason or process.returncode}); "
                f"{REMEDY}",
                bwrap=bwrap,
            )
        _PROBED.add(bwrap)
        if conditions is not None:
            layers.keep(where, KEPT_PROBE, conditions + b"yes\n")

    try:
        yield answer
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.communicate()


_NAMESPACES = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)


def sandbox_env(
    base: dict[str, str], promoter: dict[str, str], home: Path, pass_env: Sequence[str]
) -> dict[str, str]:
    """The command's environment, from scratch: no credential but the run's token."""
    env = {k: base[k] for k in _KEPT_ENV if k in base}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    for name in pass_env:
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"--pass-env {name!r}: not a variable's name")
        if name.startswith("PROMOTER_"):
            raise ConfigError(f"--pass-env {name}: the PROMOTER_ variables are the run's own")
        if name in ("HOME", "TMPDIR"):  # set below for every step: passed, they would not be
            raise ConfigError(f"--pass-env {name}: HOME and TMPDIR are the sandbox's own")
        if name in base:
            env[name] = base[name]
    env.update(HOME=str(home), TMPDIR=_PRIVATE_TMP, **promoter)
    return env


def inside_url(url: str) -> tuple[str, int]:
    """The daemon's URL as the sandbox sees it (its host on loopback), and its port."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"a confined run reaches the daemon over http(s) only, not {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname
    if host not in ("localhost", "127.0.0.1"):
        host = "127.0.0.1"
    return urlunsplit((parts.scheme, f"{host}:{port}", parts.path, "", "")), port


@contextlib.contextmanager
def _pids_cgroup(name: str, limit: int) -> Iterator[tuple[str, Path | None]]:
    """A new pids cgroup limited to ``limit`` processes, if one can be made; killed after.

    Only a cgroup this call made is ever removed: a name that was taken is left alone.
    """
    made: Made | None = None
    kind = "rlimit"
    for root, label in ((_PIDS_V1, "cgroup-v1"), (_CGROUP2, "cgroup-v2")):
        if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
            continue
        if label == "cgroup-v2" and "pids" not in _read(root / "cgroup.controllers"):
            continue
        candidate = root / name
        try:
            made = Made.mkdir(candidate)
        except OSError:
            continue
        try:
            (candidate / "pids.max").write_text(str(limit))
        except OSError:
            with contextlib.suppress(OSError, PathUnsafe):
                made.remove()
            made = None
            continue
        kind = label
        break
    try:
        yield kind, None if made is None else Path(made.path)
    finally:
        if made is not None:
            _kill_cgroup(made)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


_PF_EXITING = 0x4  # a task's flag (``/proc/PID/stat``): in the kernel's exit, past user space
_REMOVING: list[threading.Thread] = []  # cgroups whose removal goes on (``settle_cgroups``)


def _exiting(pid: int) -> bool:
    """Whether process ``pid`` is gone or in its exit (it runs no code of its own again)."""
    fields = _read(Path(f"/proc/{pid}/stat")).rpartition(")")[2].split()
    if len(fields) < 7:
        return True  # gone (reaped)
    return fields[0] in ("Z", "X", "x") or bool(int(fields[6]) & _PF_EXITING)


def _kill_cgroup(made: Made) -> None:
    """Kill every process left in the cgroup ``made`` until none runs code of its own,
    then remove it: at once when it is empty, else in the background while the last ones
    finish their exit (bwrap's init takes its namespaces down a few milliseconds after
    bwrap itself; ``settle_cgroups`` waits for it)."""
    group = Path(made.path)
    pids: list[int] = []
    for _ in range(100):
        pids = [int(p) for p in _read(group / "cgroup.procs").split()]
        if all(_exiting(pid) for pid in pids):
            break
        for pid in pids:  # none is this process's child: bwrap, their ancestor, is reaped
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if not pids:
        _remove_cgroup(made)
        return
    if not _REMOVING:
        atexit.register(settle_cgroups)
    removing = threading.Thread(target=_remove_cgroup, args=(made,), daemon=True)
    removing.start()
    _REMOVING.append(removing)


def _sweep_cgroups(root: Path) -> None:
    """Remove the empty pids cgroups under ``root`` that a killed run left: named as a
    stem's (``promoter-`` a label of its own, ``-`` the pid of the process that made it)
    whose maker is gone. Anything else, or one with a process in it, is left alone."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        label, _, maker = name.removeprefix("promoter-").rpartition("-")
        if not name.startswith("promoter-") or not maker.isdigit() or not _stem_label(label):
            continue
        try:
            os.kill(int(maker), 0)
            continue  # its maker runs (or another user's process has the pid now)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        path = root / name
        if _read(path / "cgroup.procs").strip():
            continue
        with contextlib.suppress(OSError, PathUnsafe):
            Made.record(path).remove()


def _stem_label(label: str) -> bool:
    """A label a stem's cgroup name holds: 12 hex digits, or a run's id."""
    digits = label.removeprefix("run_")
    size = 16 if label.startswith("run_") else 12
    return len(digits) == size and all(c in "0123456789abcdef" for c in digits)


def settle_cgroups() -> None:
    """Wait until every cgroup whose removal went on in the background is removed (at the
    latest as the process exits)."""
    while _REMOVING:
        _REMOVING.pop().join()


def _remove_cgroup(made: Made) -> None:
    for _ in range(10_000):  # 10 s at most
        try:
            made.remove()  # False: gone already
            return
        except PathUnsafe as exc:
            log.warning("%s", exc.detail)
            return
        except OSError:
            # a killed process is still in its exit (bwrap's init a few milliseconds
            # after bwrap itself): asked again soon
            threading.Event().wait(0.001)


def _bwrap_argv(
    bwrap: str, box: Sandbox, relay: Relay | None, port: int, *, step_fd: int | None = None
) -> list[str]:
    argv = [bwrap, *_NAMESPACES]
    if not box.network:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    hidden = {Path(p) for p in _ALWAYS_HIDDEN}
    hidden |= {Path(os.path.realpath(p)) for p in box.hide}
    for path in sorted(hidden, key=lambda p: (len(p.parts), str(p))):
        if not hidden.isdisjoint(path.parents):
            continue  # already hidden with its parent
        if path.is_dir() and not path.is_symlink() and path != Path("/"):
            if str(path) not in _PRIVATE_WRITABLE:
                argv += ["--perms", "0555"]  # read-only for a command without capabilities
            argv += ["--tmpfs", str(path)]
    base = interpreter_prefix()
    clone, home = os.path.realpath(box.clone), os.path.realpath(box.home)
    # nothing hidden may sit below what is bound back over the hidden directories
    check_hidden(hidden - {Path(p) for p in _ALWAYS_HIDDEN}, [], [Path(clone), Path(home), base])
    if base in hidden or not hidden.isdisjoint(base.parents):
        argv += ["--ro-bind", str(base), str(base)]  # the entry's interpreter stays usable
    argv += ["--bind", clone, clone, "--bind", home, home]
    if relay is not None:
        argv += ["--ro-bind", str(relay.directory), os.path.dirname(SOCKET_INSIDE)]
    if box.overlay is not None:
        argv += box.overlay.binds()
    # inside the sandbox's namespace: whatever is there, nothing the sandbox does not see
    start = os.path.join(clone, box.workdir) if box.workdir else clone
    argv += ["--chdir", start, "--", _python(), "-I", "-S", "-c", _ENTRY.read_text()]
    argv += [SOCKET_INSIDE if relay is not None else "", str(port)]
    if step_fd is not None:  # the step's own variables come on it (``Prepared.run``)
        argv.append(str(step_fd))
    return argv


def interpreter_prefix() -> Path:
    """The host interpreter's prefix, bound back into the sandbox when it is hidden."""
    return Path(os.path.realpath(sys.base_prefix))


def _python() -> str:
    """The host's base interpreter (stdlib only: the entry needs no installed package)."""
    candidate = getattr(sys, "_base_executable", None) or sys.executable
    return str(candidate)


def run_confined(
    command: Sequence[str],
    box: Sandbox,
    env: dict[str, str],
    url: str,
    timeout: float,
    run_id: str,
    stem: Stem | None = None,
) -> Outcome:
    """Run ``command`` confined; its exit status and which process limit ran.

    ``stem``: its first process, started as the run began (``Stem``); one that does not
    fit the command's limits and locale is ended and another is started."""
    early = {k: v for k, v in env.items() if k not in STEP_ENV}
    with prepare_confined(command, box, early, url, run_id, stem) as prepared:
        return prepared.run({k: v for k, v in env.items() if k in STEP_ENV}, timeout)


STEP_ENV = ("PROMOTER_TOKEN",)  # a step's own variables: known once its grant is registered


def prepare_confined(
    command: Sequence[str],
    box: Sandbox,
    env: dict[str, str],
    url: str,
    run_id: str,
    stem: Stem | None = None,
) -> Prepared:
    """``command`` confined, made ready up to its start: the chain goes on to bubblewrap
    and the sandbox's entry (``sandbox_entry.py``), which waits for the step's own
    variables (``STEP_ENV``: ``Prepared.run``) before it starts the command. ``env``: the
    command's environment but those. ``stem`` as ``run_confined``'s."""
    bwrap = bwrap_path()
    probe(bwrap)
    box.home.mkdir(mode=0o700, exist_ok=True)
    env = dict(env)
    relay: Relay | None = None
    port = 0
    if not box.network:
        env["PROMOTER_URL"], port = inside_url(env["PROMOTER_URL"])
        relay = Relay(url)
    try:
        with contextlib.ExitStack() as started:
            if stem is None or not stem.fits(box.limits.procs, env):
                if stem is not None:
                    stem.close()
                stem = started.enter_context(Stem(box.limits.procs, label=run_id))
            stem.ready()  # its descriptors' numbers go into the chain
            limits = box.limits
            shim = [_python(), "-I", "-S", "-c", _LIMITS_SHIM]
            shim += [str(limits.memory), str(limits.file_size), str(limits.procs), stem.go]
            # the overlay's mount first, then the limits' shim (let go once in its cgroup)
            entry = _bwrap_argv(bwrap, box, relay, port, step_fd=stem.step_fd)
            limited = [*shim, *entry, "--", *command]
            argv = box.overlay.wrap(limited) if box.overlay else limited
            stem.send(argv, env, box.clone)
            return Prepared(box, relay, stem, started.pop_all())
    except BaseException:
        _after(relay, _written(box), quiet=True)
        raise


class Prepared:
    """A confined command ready to start (``prepare_confined``): ``run`` hands the entry
    the step's own variables and shows the command until it ends; ``close`` (or leaving
    the context) ends it unstarted, and what it made."""

    def __init__(self, box: Sandbox, relay: Relay | None, stem: Stem, own: contextlib.ExitStack):
        self.box = box
        self._relay = relay
        self._stem = stem
        self._own = own  # the stem, when it was started here
        self._done = False

    @property
    def procs_limit(self) -> str:
        """What limits its processes (as ``Outcome.procs_limit``), known before it starts."""
        return self._stem.kind

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, step_env: dict[str, str], timeout: float) -> Outcome:
        """Start the command with ``step_env`` added; its outcome once it has ended."""
        assert not self._done
        try:
            with self._own:
                self._stem.start(step_env)
                code = self._stem.wait(timeout)
        except BaseException:
            self._done = True
            _after(self._relay, _written(self.box), quiet=True)
            raise
        self._done = True
        _after(self._relay, _written(self.box), quiet=False)  # every process of it has ended
        return Outcome(code, self._stem.kind)

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._stem.close()
            self._own.close()
        finally:
            _after(self._relay, _written(self.box), quiet=True)


def _written(box: Sandbox) -> tuple[Path, ...]:
    """Where the command's writes are on the host: an overlay's upper layer (its clone is
    only the mount point there), else the clone; and its HOME."""
    if box.overlay is not None:
        return (box.overlay.layers.upper, box.home)
    return (box.clone, box.home)


def _after(relay: Relay | None, trees: Sequence[Path], *, quiet: bool) -> None:
    """The relay closed and the trees disarmed; ``quiet``: an error is logged, not raised
    (another one is on its way out)."""
    if relay is not None:
        relay.close()
    try:
        disarm(*trees)
    except PathUnsafe as exc:
        if not quiet:
            raise
        log.warning("%s", exc.detail)


def run_unconfined(
    command: Sequence[str],
    clone: Path,
    env: dict[str, str],
    timeout: float,
    start: int | None = None,
) -> int:
    """Run ``command`` as the person, in the clone, in a process group of its own.

    ``start``: a descriptor of the directory it starts in (``run.where.opened``), entered
    by the child as it is (``/proc/self/fd``), never by a path a link could redirect."""
    cwd = clone if start is None else Path(f"/proc/self/fd/{start}")
    try:
        code = _wait(list(command), env, cwd, timeout)
    except BaseException:
        _after(None, (clone,), quiet=True)
        raise
    _after(None, (clone,), quiet=False)
    return code


def disarm(*trees: Path) -> None:
    """Drop every set-ID bit the command left in the sandbox (``own_tree.disarm_tree``).

    Inside the sandbox the bits never worked (its mounts are ``nosuid``, its user
    namespace has no privilege); this keeps them from working on the host after the run.
    """
    for tree in trees:
        try:
            unlinked = disarm_tree(tree)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise PathUnsafe(
                f"the set-ID bits in {tree} could not be dropped: {exc.strerror or exc}",
                path=str(tree),
            ) from exc
        for path in unlinked:
            log.warning("%s: a set-ID file with another link, unlinked from the sandbox", path)


class _Join:
    """The confined command's pids cgroup, joined by promoter for the limits' shim: the
    shim's process is written into ``procs`` while its interpreter starts (a migration
    waits for the kernel, about as long as that start), then a byte on the pipe whose
    read end is ``go`` lets the shim go on; without it the shim exits, never running bwrap."""

    def __init__(self, procs: Path) -> None:
        self.procs = procs
        self.go, self._said = os.pipe()

    def __enter__(self) -> _Join:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (self.go, self._said):
            if fd >= 0:
                os.close(fd)
        self.go = self._said = -1

    def __call__(self, pid: int) -> None:
        """Place the started shim (``pid``) in the cgroup, then let it go on (one that
        already ended is left to its own end: nothing reads the byte, nothing runs)."""
        os.close(self.go)  # the shim's alone now
        self.go = -1
        try:
            fd = os.open(self.procs, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise ConfigError(
                f"the command could not be placed in its pids cgroup {self.procs.parent}: "
                f"{exc.strerror or exc}"
            ) from exc
        faults.point("pids_cgroup_joined")
        # one that ended unread (the overlay's mount failed) never runs bwrap: its status
        # and its words on the pane say why, not a broken pipe of promoter's
        with contextlib.suppress(BrokenPipeError):
            os.write(self._said, b"1")


class Stem:
    """A confined command's first process, started as the run begins (``_STEM``): the
    host's Python on the command's pane (``pane.py``), in its pids cgroup (``_Join``),
    waiting for what to run; all made by a thread of its own while the run goes on
    (``ready`` waits for it). Its interpreter's start and the cgroup's migration are over
    by the time the sandbox is made; ``run`` hands it the chain, its environment and
    directory, shows its output and ends it. Ended unused (``close``, or leaving the
    context), it has run nothing: the message's pipe closes, it exits, its group is
    killed and its cgroup removed."""

    def __init__(self, procs: int, *, label: str | None = None) -> None:
        self.procs = procs
        self.locale = {k: os.environ[k] for k in _LOCALE if k in os.environ}
        self.kind = "rlimit"
        self.go = ""  # the limits' shim's ``go`` descriptor in the stem, or none
        self._label = label or os.urandom(6).hex()
        self._stack = contextlib.ExitStack()
        self._process: subprocess.Popen[bytes] | None = None
        self._pane: Pane | None = None
        self._msg = -1
        self.step_fd = -1  # where the chain's entry reads the step's own variables
        self._step = -1
        self._joining: threading.Thread | None = None
        self._refused: BaseException | None = None
        self._ended = False

    def __enter__(self) -> Stem:
        self._joining = threading.Thread(target=self._started, daemon=True)
        self._joining.start()
        return self

    def ready(self) -> None:
        """Wait until it has started and joined its cgroup; raise what kept it from it."""
        if self._joining is not None:
            self._joining.join()
        if self._refused is not None:
            raise self._refused

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fits(self, procs: int, env: dict[str, str]) -> bool:
        """Whether this stem may run a command limited to ``procs`` processes in ``env``."""
        locale = {k: env[k] for k in _LOCALE if k in env}
        return not self._ended and procs == self.procs and locale == self.locale

    def _started(self) -> None:
        """Start it, place it in its cgroup, then sweep what killed runs left there."""
        try:
            join = self._start()
            if join is not None:
                assert self._process is not None
                join(self._process.pid)
        except BaseException as exc:  # raised by ``ready``, before anything is handed over
            self._refused = exc
            return
        if join is not None:
            _sweep_cgroups(join.procs.parent.parent)  # while the run goes on

    def _start(self) -> _Join | None:
        name = f"promoter-{self._label}-{os.getpid()}"
        self.kind, group = self._stack.enter_context(_pids_cgroup(name, self.procs))
        join = None if group is None else self._stack.enter_context(_Join(group / "cgroup.procs"))
        shown = self._pane = self._stack.enter_context(Pane())
        msg, self._msg = os.pipe()
        step, self._step = os.pipe()
        try:
            popen = shown.popen_args()
            passed = (msg, step, *([join.go] if join else []))
            popen["pass_fds"] = (*popen["pass_fds"], *passed)
            self.go = "" if join is None else str(join.go)
            self.step_fd = step
            argv = [_python(), "-I", "-S", "-c", _STEM, str(msg)]
            try:
                self._process = subprocess.Popen(argv, env=dict(self.locale), **popen)
            except OSError as exc:
                raise ConfigError(
                    f"the command could not be started: {exc.strerror or exc}"
                ) from exc
        finally:
            os.close(msg)
            os.close(step)
        shown.handed()
        return join

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> int:
        """Run the chain ``argv`` (the limits' shim told ``go``) in ``cwd`` with ``env``;
        its exit status once every process of it has ended."""
        try:
            self.send(argv, env, cwd)
            self.start({})
        except BaseException:
            self.close()
            raise
        return self.wait(timeout)

    def send(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        """Hand over the chain ``argv`` (the limits' shim told ``go``, the entry told
        ``step_fd`` where it waits for the step's own variables), ``env`` and ``cwd``."""
        self.ready()
        shown = self._pane
        assert shown is not None and not self._ended and self._msg >= 0
        message = _message(cwd, env, shown.argv(argv))
        with contextlib.suppress(BrokenPipeError):  # it ended: its status says how
            _write_all(self._msg, message)
        os.close(self._msg)
        self._msg = -1

    def start(self, step_env: dict[str, str]) -> None:
        """Let the command start, ``step_env`` added to its environment by the entry."""
        shown = self._pane
        assert shown is not None and not self._ended and self._step >= 0
        body = _message(None, step_env, ())
        sys.stdout.flush()  # what promoter printed comes before the command's output
        shown.resized()
        with contextlib.suppress(BrokenPipeError):  # the chain ended: its status says how
            _write_all(self._step, str(len(body)).encode() + b"\n" + body)
        os.close(self._step)
        self._step = -1

    def wait(self, timeout: float) -> int:
        """Show the command's output until it ends; its exit status, once every process
        of it has ended (the stem is closed)."""
        process, shown = self._process, self._pane
        assert process is not None and shown is not None
        try:
            try:
                shown.started()
            except OSError as exc:
                raise ConfigError(f"the command could not be started: {exc.strerror}") from exc
            return shown.pump(process, timeout, stop=lambda: _end(process))
        except subprocess.TimeoutExpired as exc:
            raise TimedOut(timeout) from exc
        finally:
            self.close()

    def close(self) -> None:
        """End it (unused: it runs nothing), then its pane and its cgroup."""
        if self._joining is not None:
            self._joining.join()  # what it made is this thread's again
        for name in ("_msg", "_step"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        if self._process is not None and not self._ended:
            self._ended = True
            _end(self._process)
        self._ended = True
        self._stack.close()


def _message(cwd: Path | None, env: dict[str, str], argv: Sequence[str]) -> bytes:
    """What ``_STEM`` reads: the directory, the environment's count and entries, argv
    (without ``cwd``: the entries alone, as the sandbox's entry reads the step's own)."""
    fields = [] if cwd is None else [os.fsencode(cwd), str(len(env)).encode()]
    for name, value in env.items():
        if not name or "=" in name:
            raise ValueError(f"illegal environment variable name: {name!r}")
        fields.append(os.fsencode(name) + b"=" + os.fsencode(value))
    fields += [os.fsencode(arg) for arg in argv]
    if any(b"\0" in field for field in fields):
        raise ValueError("embedded null byte")
    return b"\0".join(fields)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _wait(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float, join: _Join | None = None
) -> int:
    """Run ``argv`` on a pane of its own (``pane.py``): its output is shown filtered.
    ``join``: the limits' shim in ``argv`` waits for its pids cgroup (``_Join``)."""
    with Pane() as shown:
        popen = shown.popen_args()
        if join is not None:
            popen["pass_fds"] = (*popen["pass_fds"], join.go)
        try:
            process = subprocess.Popen(shown.argv(argv), cwd=cwd, env=env, **popen)
        except OSError as exc:
            raise ConfigError(f"the command could not be started: {exc.strerror or exc}") from exc
        try:
            try:
                if join is not None:
                    join(process.pid)
                shown.started()
            except OSError as exc:
                raise ConfigError(f"the command could not be started: {exc.strerror}") from exc
            return shown.pump(process, timeout, stop=lambda: _end(process))
        except subprocess.TimeoutExpired as exc:
            _end(process)
            raise TimedOut(timeout) from exc
        except BaseException:
            _end(process)
            raise
        finally:
            _end(process)


def _end(process: subprocess.Popen[bytes]) -> None:
    """Kill the process group (bwrap's PID namespace dies with bwrap) and reap it. Once
    reaped it is never signalled again: its number may then be another process's group
    (the group was killed before the reap, while its leader still held the number)."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
