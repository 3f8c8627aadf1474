"""Layered sandboxes: an overlay of a shared base, a start layer and the run's upper layer.

This module owns the layout of ``<state>/runs/<run_id>/`` (protocol: runs#layered-sandboxes):
``layers/start/`` (read-only: the person's changes against HEAD, with whiteouts, and the
command's own small ``.git`` whose objects reach the person's through a read-only bind),
``layers/upper/`` and ``layers/work/`` (every write of the command) and ``clone/``, the
mount point, mounted only inside the command's own namespaces (``wrap``). ``resolve``
reads a path through the layers as the kernel would, never following links, so promoter
reads a sandbox without mounting it; a ``Resolver`` gives the same answers for the many
reads of one pass, each directory and path looked up once.

Not here: judging the changes (``upper.py``), the base (``base_cache.py``), bubblewrap's
other options (``confine.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from promoter.errors import ConfigError
from promoter.executor.shims import FOLD
from promoter.fs.own_entry import OwnTree

__all__ = [
    "LAYOUT_ENV",
    "OBJECTS_INSIDE",
    "Layers",
    "Overlay",
    "Resolver",
    "available",
    "chosen_layout",
    "is_whiteout",
    "resolve",
]

LAYOUT_ENV = "PROMOTER_SANDBOX_LAYOUT"  # "overlay", "copy" or "auto" (the default)
OBJECTS_INSIDE = "/run/promoter-objects"
OPAQUE = "user.overlay.opaque"
_START, _UPPER, _WORK = "layers/start", "layers/upper", "layers/work"

# Run by the host's Python (``-I -S``) before the command's limits are set (it starts no
# process; the limits' shim follows it, in this interpreter, ``shims.py``), calling libc
# through ``_ctypes`` as ``ctypes.CDLL`` does (importing ``ctypes`` itself, with
# ``struct``, cost this interpreter a third of its start): a user and
# mount namespace of its own (the caller's uid and gid mapped to themselves), nothing of
# it propagated anywhere, the overlay mounted on ``clone``, then what follows (the limits'
# shim, then bubblewrap). No redirects and no metadata-only copy-up: every file in the
# upper layer is whole, and a renamed directory is copied (``upper.py`` reads the layers
# as plain directories).
_MOUNT = (
    """\
import _ctypes, os, sys
home, lower, into, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5:]
assert sys.argv[4] == "--"
class _Int(_ctypes._SimpleCData):
    _type_ = "i"
class _Call(_ctypes.CFuncPtr):  # a function of ctypes.CDLL(None, use_errno=True)
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int
class _Libc:
    _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)
    def __getattr__(self, name):
        return _Call((name, self))
libc = _Libc()
def check(result, what):
    if result != 0:
        err = _ctypes.get_errno()
        sys.stderr.write("promoter: %s: %s\\n" % (what, os.strerror(err)))
        os._exit(125)
uid, gid = os.getuid(), os.getgid()
check(libc.unshare(0x10000000 | 0x00020000), "unshare")  # CLONE_NEWUSER | CLONE_NEWNS
for name, data in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (uid, uid)),
                   ("gid_map", "%d %d 1" % (gid, gid))):
    fd = os.open("/proc/self/" + name, os.O_WRONLY)
    os.write(fd, data.encode())
    os.close(fd)
check(libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None), "private mounts")
os.chdir(home)
options = ("lowerdir=%s,upperdir=layers/upper,workdir=layers/work,userxattr,"
           "redirect_dir=nofollow,metacopy=off,index=off" % lower)
check(libc.mount(b"overlay", b"clone", b"overlay", 0, options.encode()), "overlay mount")
os.chdir("clone")
if into:  # below the merged root, a directory at a time, never through a link
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    for name in into.split("/"):
        try:
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
        except OSError as exc:
            sys.stderr.write("promoter: %s: not a directory of the sandbox: %s\\n"
                             % (into, os.strerror(exc.errno)))
            os._exit(125)
        os.close(here)
        here = below
    os.fchdir(here)
    os.close(here)
"""
    + FOLD
    + """\
if is_shim(argv):  # the limits' shim, in this interpreter (``shims.py``)
    run_shim(argv)
os.execvp(argv[0], argv)
"""
)


def _python() -> str:
    return str(getattr(sys, "_base_executable", None) or sys.executable)


class Layers(NamedTuple):
    """The directories of one overlay sandbox (``home`` is ``<state>/runs/<run_id>``)."""

    home: Path
    bases: tuple[Path, ...]
    """The base's layers, top first (a base made over an older one is two or more)."""

    @property
    def start(self) -> Path:
        return self.home / _START

    @property
    def upper(self) -> Path:
        return self.home / _UPPER

    @property
    def work(self) -> Path:
        return self.home / _WORK

    @property
    def mount_point(self) -> Path:
        return self.home / "clone"

    def below(self) -> list[Path]:
        """The read-only layers, top first: what the sandbox started from."""
        return [self.start, *self.bases]

    def all(self) -> list[Path]:
        """Every layer, top first: the sandbox as the command left it."""
        return [self.upper, self.start, *self.bases]


class Overlay(NamedTuple):
    """What ``confine`` needs to run a command in an overlay sandbox."""

    layers: Layers
    objects: Path
    """The person's object directory, bound read-only at ``OBJECTS_INSIDE``."""

    def binds(self) -> list[str]:
        return ["--ro-bind", os.path.realpath(self.objects), OBJECTS_INSIDE]

    def wrap(self, argv: Sequence[str], into: str = "") -> list[str]:
        """``argv`` (the limits' shim before bubblewrap, or a command) run inside a
        namespace where the overlay is mounted; ``into``: the directory below the merged
        root it starts in, entered without following a link (an unconfined command's:
        ``run.where``)."""
        home = os.path.realpath(self.layers.home)
        lower = [os.path.relpath(os.path.realpath(p), home) for p in self.layers.below()]
        for path in lower:  # the mount options' separators
            if any(c in path for c in ":,\\"):
                raise ConfigError(f"a sandbox layer's path holds ':' or ',': {path}")
        return [_python(), "-I", "-S", "-c", _MOUNT, home, ":".join(lower), into, "--", *argv]


def chosen_layout(unconfined: bool, where: Path) -> str:
    """``overlay`` or ``copy``: ``$PROMOTER_SANDBOX_LAYOUT``, else overlay where it works.

    ``--unconfined`` runs keep the copy clone (no namespace to mount in). A layout asked
    for by name that cannot be made here is refused (``ConfigError``).
    """
    wanted = os.environ.get(LAYOUT_ENV, "auto") or "auto"
    if wanted not in ("auto", "overlay", "copy"):
        raise ConfigError(f"{LAYOUT_ENV}={wanted!r}: one of auto, overlay, copy")
    if wanted == "copy" or unconfined:
        return "copy"
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    if available(where):
        return "overlay"
    if wanted == "overlay":
        raise ConfigError(
            f"{LAYOUT_ENV}=overlay, but an overlay cannot be mounted in a user namespace here"
        )
    return "copy"


_AVAILABLE: dict[str, bool] = {}
KEPT_ANSWER = "overlay-probe"  # in the directory probed: the answer and its conditions
# the kernel's switches for unprivileged user namespaces, where this kernel has them
_SWITCHES = (
    "/proc/sys/kernel/random/boot_id",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)


def available(where: Path) -> bool:
    """Whether an overlay can be mounted in a user namespace on ``where``'s filesystem
    (a directory that exists; probed once per process, and the answer kept in ``where``
    for later processes while what it depends on is unchanged: ``_conditions``)."""
    key = os.path.realpath(where)
    if key not in _AVAILABLE:
        _AVAILABLE[key] = _kept_or_probed(key)
    return _AVAILABLE[key]


def _conditions(where: str) -> str:
    """What the probe's answer depends on: this boot of the kernel and its switches for
    user namespaces, the user, the filesystem ``where`` is on and the interpreter that
    mounts (a change in any of them probes again)."""
    values = [f"uid {os.getuid()}", f"dev {os.stat(where).st_dev}", f"python {_python()}"]
    return "\n".join([*values, *switches(_SWITCHES)]) + "\n"


def switches(paths: Sequence[str]) -> list[str]:
    """Each kernel switch of ``paths`` with its value now (``-`` where it cannot be read)."""
    values = []
    for switch in paths:
        try:
            with open(switch, "rb") as handle:
                value = handle.read(200).decode("ascii", "replace").strip()
        except OSError:
            value = "-"
        values.append(f"{switch} {value}")
    return values


def _kept_or_probed(where: str) -> bool:
    """The answer kept in ``where`` under the same conditions, else the probe's (kept)."""
    conditions = _conditions(where)
    kept = read_kept(where, KEPT_ANSWER)
    for answer, word in ((True, b"yes\n"), (False, b"no\n")):
        if kept == conditions.encode() + word:
            return answer
    answer = _probe(where)
    keep(where, KEPT_ANSWER, conditions.encode() + (b"yes\n" if answer else b"no\n"))
    return answer


def read_kept(where: str, name: str) -> bytes:
    """A probe's answer kept in ``where`` under ``name`` (never through a link), or b""."""
    try:
        fd = os.open(os.path.join(where, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        return handle.read(4096)


def keep(where: str, name: str, text: bytes) -> None:
    """Write a probe's answer for later processes (a directory that refuses it keeps
    nothing: the next process probes again)."""
    from promoter.fs.own_temp import OwnTemp

    try:
        temp = OwnTemp.create(where, ".promoter-tmp-probe-")
    except OSError:
        return
    try:
        with os.fdopen(temp.fd, "wb") as handle:
            handle.write(text)
        temp.place(os.path.join(where, name))
    except OSError:
        temp.discard()


def _probe(where: str) -> bool:
    with tempfile.TemporaryDirectory(prefix=".promoter-tmp-probe-", dir=where) as temp:
        home = Path(temp)
        for name in ("layers/start", "layers/upper", "layers/work", "base", "clone"):
            (home / name).mkdir(parents=True)
        overlay = Overlay(Layers(home, (home / "base",)), home)
        argv = overlay.wrap(["/bin/sh", "-c", ": > probe"])
        try:
            done = subprocess.run(argv, cwd=home, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        else:
            ok = done.returncode == 0 and (home / "layers" / "upper" / "probe").is_file()
        _allow_removal(home / "layers" / "work")
    return ok


def _allow_removal(work: Path) -> None:
    """The kernel leaves ``work/work`` with mode 0: make it the owner's again."""
    with contextlib.suppress(OSError):
        os.chmod(work / "work", 0o700, follow_symlinks=False)


def prepare_removal(home: Path) -> None:
    """Let a removal walk the sandbox ``home``: its overlay work directory readable."""
    work = home / _WORK
    if work.is_dir() and not work.is_symlink():
        _allow_removal(work)


def is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def opaque(path: str | bytes) -> bool:
    try:
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _lstat(path: bytes) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def resolve(layers: Sequence[Path], path: str) -> tuple[bytes, os.stat_result] | None:
    """Where ``path`` is in the merged view of ``layers`` (top first), and its lstat;
    None when absent. Never follows a link; a whiteout, a non-directory or an opaque
    directory hides everything below it in lower layers."""
    parts = os.fsencode(path).split(b"/")
    active = [os.fsencode(layer) for layer in layers]
    for depth, name in enumerate(parts):
        last = depth == len(parts) - 1
        found: list[bytes] = []
        for directory in active:
            full = os.path.join(directory, name)
            st = _lstat(full)
            if st is None:
                continue
            if is_whiteout(st):
                break
            if last:
                return full, st
            if not stat.S_ISDIR(st.st_mode):
                break
            found.append(full)
            if opaque(full):
                break
        if last or not found:
            return None
        active = found
    return None


Found = tuple[bytes, os.stat_result]


class Resolver:
    """``resolve`` over one stack of layers, for the reads of one pass over layers that
    nothing writes meanwhile (a bundle's build, after the command ended): each leading
    directory's layers are found once and each path's answer is kept, so a path read
    again and the paths of a shared folder cost no further system call. Its answers are
    ``resolve``'s."""

    def __init__(self, layers: Sequence[Path]) -> None:
        top = [os.fsencode(layer) for layer in layers]
        self._folders: dict[bytes | None, list[bytes] | None] = {None: top}  # None: the top
        self._found: dict[str, Found | None] = {}

    def __call__(self, path: str) -> Found | None:
        if path in self._found:
            return self._found[path]
        parent, slash, name = os.fsencode(path).rpartition(b"/")
        active = self._folder(parent if slash else None)
        found: Found | None = None
        for directory in active or ():
            full = os.path.join(directory, name)
            st = _lstat(full)
            if st is None:
                continue
            if not is_whiteout(st):
                found = (full, st)
            break
        self._found[path] = found
        return found

    def _folder(self, folder: bytes | None) -> list[bytes] | None:
        """The layers' directories that make up ``folder`` in the merged view, top
        first; None when it is not a directory there (``resolve``'s walk, kept)."""
        missing: list[bytes] = []  # folder, then its parents, up to one already known
        while folder not in self._folders:
            assert folder is not None
            missing.append(folder)
            parent, slash, _ = folder.rpartition(b"/")
            folder = parent if slash else None
        active = self._folders[folder]
        for name_of in reversed(missing):
            active = self._folders[name_of] = _below(active, name_of.rpartition(b"/")[2])
        return active


def _below(active: list[bytes] | None, name: bytes) -> list[bytes] | None:
    """The directories of ``name`` under the merged directory ``active`` (top first);
    None when it is no directory there: a whiteout, a non-directory or an opaque
    directory hides everything below it in lower layers."""
    found: list[bytes] = []
    for directory in active or ():
        full = os.path.join(directory, name)
        st = _lstat(full)
        if st is None:
            continue
        if is_whiteout(st) or not stat.S_ISDIR(st.st_mode):
            break
        found.append(full)
        if opaque(full):
            break
    return found or None


def listing(layers: Sequence[Path], directory: str) -> dict[bytes, tuple[bytes, os.stat_result]]:
    """The merged entries of ``directory`` ("" for the top): name -> (where, lstat)."""
    if directory:
        found = resolve(layers, directory)
        if found is None or not stat.S_ISDIR(found[1].st_mode):
            return {}
    parts = os.fsencode(directory).split(b"/") if directory else []
    stack = _directories(layers, parts)
    merged: dict[bytes, tuple[bytes, os.stat_result]] = {}
    hidden: set[bytes] = set()
    for full in stack:
        for name in os.listdir(full):
            if name in merged or name in hidden:
                continue
            st = os.lstat(os.path.join(full, name))
            if is_whiteout(st):
                hidden.add(name)
            else:
                merged[name] = (os.path.join(full, name), st)
    return merged


def _directories(layers: Sequence[Path], parts: list[bytes]) -> list[bytes]:
    """The layers' directories that merge at ``parts``, top first."""
    active: list[bytes] | None = [os.fsencode(layer) for layer in layers]
    for name in parts:
        active = _below(active, name)
    return active or []


def walk_files(layers: Sequence[Path], directory: str) -> Iterator[str]:
    """Every non-directory path at or below ``directory`` in the merged view."""
    found = resolve(layers, directory) if directory else None
    if directory and found is None:
        return
    if directory and found is not None and not stat.S_ISDIR(found[1].st_mode):
        yield directory
        return
    pending = [directory]
    while pending:
        current = pending.pop()
        for name, (_, st) in sorted(listing(layers, current).items()):
            path = f"{current}/{os.fsdecode(name)}" if current else os.fsdecode(name)
            if stat.S_ISDIR(st.st_mode):
                pending.append(path)
            else:
                yield path


def needs_no_whiteout(path: str, written: set[str]) -> bool:
    """Whether a deletion needs no whiteout: an ancestor is written as a file, or ``path``
    becomes a directory of written files (either hides the entry below it)."""
    parts = path.split("/")
    if any("/".join(parts[:depth]) in written for depth in range(1, len(parts))):
        return True
    return any(other.startswith(path + "/") for other in written)


def collapse_empty(top: Path, lower: Sequence[Path]) -> None:
    """Where ``top``'s whiteouts leave a directory of ``lower`` with nothing, whiteout the
    directory itself (a clone's deletes remove such a directory too). ``top`` is
    promoter's own layer in the making (a start layer, a base's delta)."""
    start = os.fsencode(top)
    dirs: list[bytes] = []
    for where, names, _ in os.walk(start):
        rel = os.path.relpath(where, start)
        if rel == b".":
            names[:] = [n for n in names if n != b".git"]
            continue
        dirs.append(rel)
    merged = [top, *lower]
    with OwnTree.open(top) as tree:
        for rel in sorted(dirs, key=lambda d: d.count(b"/"), reverse=True):
            path = os.fsdecode(rel)
            if listing(merged, path):
                continue
            if resolve(lower, path) is None:
                continue  # the person's own empty directory: none below either
            *parents, name = rel.split(b"/")
            with tree.directory([*parents, name]) as inner:
                for entry in os.listdir(inner.fd):
                    inner.remove_entry(entry)
            with tree.directory(parents) as folder:
                folder.remove_empty_dir(name)
                os.mknod(name, stat.S_IFCHR | 0o600, os.makedev(0, 0), dir_fd=folder.fd)


_CONFIG = b"""\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\tsymlinks = true
"""


def lay_git(start: Path, branch: str, head: str) -> None:
    """The command's own ``.git`` in the start layer (objects: the start tree's and,
    through ``alternates``, the person's, read-only)."""
    git = start / ".git"
    short = branch.removeprefix("refs/heads/")
    ref = git / "refs" / "heads" / short
    for path in (git / "objects" / "info", git / "objects" / "pack", git / "info", ref.parent):
        path.mkdir(parents=True, exist_ok=True)
    (git / "refs" / "tags").mkdir(exist_ok=True)
    (git / "hooks").mkdir(exist_ok=True)
    (git / "HEAD").write_bytes(f"ref: refs/heads/{short}\n".encode())
    ref.write_bytes(head.encode("ascii") + b"\n")
    (git / "config").write_bytes(_CONFIG)
    (git / "description").write_bytes(b"a sandbox of promoter run\n")


def point_alternates(start: Path) -> None:
    """Name the read-only bind of the person's objects (only inside the sandbox)."""
    alternates = start / ".git" / "objects" / "info" / "alternates"
    alternates.write_bytes(OBJECTS_INSIDE.encode() + b"\n")


def make_dirs(layers: Layers) -> None:
    for path in (layers.start, layers.upper, layers.work, layers.mount_point):
        path.mkdir(parents=True, mode=0o700)
