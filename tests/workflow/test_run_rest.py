"""P1: the merge of the person's save and the agent's edit conflicts; the rest is offered.

The agent changes main.py, notes.txt and adds lib.py; the person saves their own edit of
main.py on the line the agent changed while ``promoter run``'s question waits (the
question holds the run until it is answered: the save always lands before the answer).
Yes to the merge conflicts on main.py; "Promote the rest, without main.py?" yes builds
the rest from the sandbox as any bundle, reviewed and confirmed as any bundle. No, or
``--yes``, or no terminal: the conflict's refusal, naming how to promote the rest later.
The real CLI on a real pseudo-terminal against a real daemon (``test_run_drift``'s
helpers); every test asserts the worktree's exact bytes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.fixtures import Gated
from tests.support.flows import sha
from tests.support.promotion import git_dir_digest, tree_bytes
from tests.workflow.test_run_drift import (
    AGENT,
    BASE,
    CLASH,
    CLI,
    MERGED,
    PERSON,
    ROOT,
    Terminal,
    _gated_run,
    _receipt_targets,
    _record,
    _run,
)

NOTES = b"notes\n"
NOTES_AGENT = b"notes\nand the agent too\n"
LIB = b"def helper():\n    return 1\n"
FILES = {"README.md": b"# project\n", "main.py": BASE, "notes.txt": NOTES}
PROMOTE = b"Promote these changes into the worktree?"
MERGE = b"main.py changed since the run began: merge your edit and the agent's? [Y/n]"
REST = b"Promote the rest, without main.py? [Y/n]"

pytestmark = pytest.mark.repo(files=FILES)


def _agent(tmp_path: Path, *, others: bool = True, also: str = "") -> str:
    """The agent's script: main.py edited, lib.py added, notes.txt edited (``others``)."""
    (tmp_path / "agent.py").write_bytes(AGENT)
    (tmp_path / "lib.py").write_bytes(LIB)
    (tmp_path / "notes.txt").write_bytes(NOTES_AGENT)
    script = f"cp {tmp_path / 'agent.py'} main.py"
    if others:
        script += f" && cp {tmp_path / 'lib.py'} lib.py && cp {tmp_path / 'notes.txt'} notes.txt"
    return script + also


def _to_the_conflict(term: Terminal, repo: Path, *, mine: dict[str, bytes] | None = None) -> int:
    """The person saves main.py (and ``mine``) at the question, says yes to it and to the
    merge; the offset past the merge's question."""
    at = term.expect(PROMOTE)
    for name, data in {"main.py": CLASH, **(mine or {})}.items():
        (repo / name).write_bytes(data)  # saved while the question waits
    term.send(b"y\r")
    at = term.expect(b"changed since the run began: merge your edit and the agent's? [Y/n]", at)
    term.send(b"y\r")
    return at


def _marked(term: Terminal) -> Path:
    named = re.search(rb"both edits with markers in (\S+)", term.plain)
    assert named is not None, term.text()
    return Path(named.group(1).decode())


def _one_line(term: Terminal) -> bytes:
    return b" ".join(term.plain.split())


def _listed(daemon: Daemon, repo: Path) -> bytes:
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    listed = Terminal([*CLI, "run", "--list", *where], repo, {})
    assert listed.finish() == 0, listed.text()
    return listed.plain


def _verified(daemon: Daemon, operation_id: str, repo: Path, tmp_path: Path) -> dict[str, str]:
    """The operation's signed receipt, fetched and verified by the CLI against the daemon's
    keys and the worktree: each target's status."""
    (tmp_path / "op.token").write_text(daemon.orchestrator_token)
    common = ["--url", daemon.url, "--token-file", str(tmp_path / "op.token")]
    env = {"PYTHONPATH": str(ROOT), "COLUMNS": "400", "NO_COLOR": "1"}

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    fetched = cli("receipt", "fetch", operation_id, "--dsse", "--out", "r.dsse", *common)
    assert fetched.returncode == 0, fetched.stderr
    done = cli("receipt", "verify", "r.dsse", "--keys-from", daemon.url, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert (summary["valid"], summary["signature"], summary["hash_ok"]) == (True, "verified", True)
    checked = cli("receipt", "verify", "r.dsse", "--keys-from", daemon.url, "--worktree", str(repo))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return _receipt_targets(daemon, operation_id)


def test_a_conflict_offers_the_rest_which_is_promoted_without_the_conflicted_file(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent(tmp_path), keep=False)
    at = _to_the_conflict(term, repo)
    at = term.expect(REST, at)
    term.send(b"y\r")
    term.expect(PROMOTE, at)  # the rest: reviewed and confirmed as any bundle
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "main.py").read_bytes() == CLASH  # the person's, byte for byte
    assert (repo / "lib.py").read_bytes() == LIB
    assert (repo / "notes.txt").read_bytes() == NOTES_AGENT
    marked = _marked(term)  # the marked file kept, named before the question
    assert term.plain.find(b"both edits with markers in") < term.plain.find(REST)
    assert b"line 2 by the person\n" in marked.read_bytes()
    assert b"line 2 by the agent\n" in marked.read_bytes()
    record = _record(daemon)
    [step] = record.steps
    assert (step.status, step.left_out) == ("completed", ["main.py"])
    assert (Path(record.clone) / "main.py").read_bytes() == AGENT  # kept, without --keep
    assert step.operation_id is not None
    assert _verified(daemon, step.operation_id, repo, tmp_path) == {
        "lib.py": sha(LIB),
        "notes.txt": sha(NOTES_AGENT),
    }
    assert f"{record.run_id}  work  1 step(s), last completed, without main.py  ".encode() in (
        _listed(daemon, repo)
    )


def test_confined_the_rest_is_built_from_the_overlay_without_the_conflicted_file(
    daemon: Daemon, repo: Path
) -> None:
    """The same under bubblewrap, the sandbox's layers over its base: the rest is built
    from the upper layer, without main.py."""
    bwrap.confining()
    files = {"main.py": AGENT, "lib.py": LIB, "notes.txt": NOTES_AGENT}
    script = " && ".join(
        f"printf '{data.decode().replace(chr(10), chr(92) + 'n')}' > {name}"
        for name, data in files.items()
    )
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    term = Terminal([*argv, "--repo", "work", "--", "sh", "-c", script], repo, {"PAGER": "cat"})
    at = _to_the_conflict(term, repo)
    at = term.expect(REST, at)
    term.send(b"y\r")
    term.expect(PROMOTE, at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert b"confined by bubblewrap" in term.plain and b"(overlay)" in term.plain
    assert (repo / "main.py").read_bytes() == CLASH
    assert (repo / "lib.py").read_bytes() == LIB
    assert (repo / "notes.txt").read_bytes() == NOTES_AGENT
    record = _record(daemon)
    [step] = record.steps
    assert (step.status, step.left_out, step.confinement) == ("completed", ["main.py"], "bwrap")
    assert step.operation_id is not None
    assert set(_receipt_targets(daemon, step.operation_id)) == {"lib.py", "notes.txt"}


@pytest.mark.repo(files={**FILES, "other.py": BASE})
def test_the_rest_holds_a_cleanly_merged_file_merged_never_the_agents_over_the_persons(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """other.py, saved by the person on another line than the agent's, merges cleanly
    beside the conflict on main.py: the rest holds it merged, both edits in it."""
    also = f" && cp {tmp_path / 'agent.py'} other.py"
    term = _run(daemon, repo, _agent(tmp_path, also=also))
    at = _to_the_conflict(term, repo, mine={"other.py": PERSON})
    at = term.expect(REST, at)
    term.send(b"y\r")
    # the rest's other.py is the agent's against the person's save: the merge is asked
    term.expect(b"other.py changed since the run began: merge your edit and the agent's?", at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "other.py").read_bytes() == MERGED
    assert (repo / "main.py").read_bytes() == CLASH
    assert (repo / "lib.py").read_bytes() == LIB
    assert (repo / "notes.txt").read_bytes() == NOTES_AGENT
    [step] = _record(daemon).steps
    assert (step.status, step.left_out) == ("completed", ["main.py"])
    assert step.operation_id is not None
    assert _receipt_targets(daemon, step.operation_id) == {
        "lib.py": sha(LIB),
        "notes.txt": sha(NOTES_AGENT),
        "other.py": sha(MERGED),
    }


def test_no_to_the_rest_names_a_command_that_offers_it_again_as_printed(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent(tmp_path))
    at = _to_the_conflict(term, repo)
    term.expect(REST, at)
    before = tree_bytes(repo), git_dir_digest(repo)
    term.send(b"n\r")
    assert term.finish() == 75, term.text()  # merge_conflict
    assert (tree_bytes(repo), git_dir_digest(repo)) == before
    record = _record(daemon)
    assert [s.status for s in record.steps] == ["merge_conflict"]
    plain = _one_line(term)
    assert b"[merge_conflict] the merge has conflicts" in plain
    assert b"next: resolve the markers and save the result as main.py yourself" in plain
    said = re.search(
        rb"the agent's other changes \(lib\.py, notes\.txt\) stay in the sandbox: promote "
        rb"them without main\.py at a terminal: (promoter run --continue \S+ .*?-- true)",
        plain,
    )
    assert said is not None, term.text()
    words = said.group(1).decode().split()
    assert words[3] == record.run_id
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    again = Terminal([*CLI, "run", *where, *words[2:]], repo, {"PAGER": "cat"})
    at = again.expect(MERGE)
    again.send(b"y\r")
    at = again.expect(REST, at)
    again.send(b"y\r")
    again.expect(PROMOTE, at)
    again.send(b"y\r")
    assert again.finish() == 0, again.text()
    assert (repo / "main.py").read_bytes() == CLASH
    assert (repo / "lib.py").read_bytes() == LIB
    assert (repo / "notes.txt").read_bytes() == NOTES_AGENT
    steps = _record(daemon).steps
    assert [(s.status, s.left_out) for s in steps] == [
        ("merge_conflict", []),
        ("completed", ["main.py"]),
    ]


@pytest.mark.parametrize("flags", [["--yes"], ["--json", "--yes"]], ids=["yes", "json"])
def test_a_part_is_never_promoted_unasked(
    daemon: Daemon, repo: Path, tmp_path: Path, flags: list[str]
) -> None:
    """``--yes`` at a terminal, ``--json --yes`` off one: the person's save during the run
    is merged unasked, the conflict stops it, and the rest is named, never promoted."""
    ready, go = tmp_path / "ready.fifo", tmp_path / "go.fifo"
    os.mkfifo(ready)
    os.mkfifo(go)
    script = _agent(tmp_path, also=f" && echo edited > {ready} && read x < {go}")
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--repo", "work", "--unconfined", *flags, "--", "sh", "-c", script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
    proc = subprocess.Popen(
        argv,
        cwd=repo,
        env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "400"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    ) if "--json" in flags else None  # fmt: skip
    term = Terminal(argv, repo, {"PAGER": "cat"}) if proc is None else None
    assert ready.read_bytes() == b"edited\n"
    (repo / "main.py").write_bytes(CLASH)
    go.write_bytes(b"go\n")
    if proc is not None:
        out, _ = proc.communicate(timeout=120)
        code = proc.returncode
    else:
        assert term is not None
        code = term.finish()
        out = term.plain
    assert code == 75, out.decode(errors="replace")
    assert (repo / "main.py").read_bytes() == CLASH
    assert (repo / "notes.txt").read_bytes() == NOTES
    assert not (repo / "lib.py").exists()
    record = _record(daemon)
    [step] = record.steps
    assert (step.status, step.left_out) == ("merge_conflict", [])
    plain = b" ".join(out.split())
    assert b"Promote the rest" not in plain
    assert b"--yes never promotes a part: answer at a terminal to promote the rest" in plain
    assert b"the agent's other changes (lib.py, notes.txt) stay in the sandbox" in plain
    assert f"at a terminal: promoter run --continue {record.run_id} ".encode() in plain


@pytest.mark.repo(files=FILES)
def test_a_conflict_on_the_only_change_asks_nothing_more(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent(tmp_path, others=False))
    _to_the_conflict(term, repo)
    assert term.finish() == 75, term.text()
    assert (repo / "main.py").read_bytes() == CLASH
    [step] = _record(daemon).steps
    assert (step.status, step.left_out) == ("merge_conflict", [])
    plain = _one_line(term)
    assert b"Promote the rest" not in plain and b"other changes" not in plain
    assert b"[merge_conflict] the merge has conflicts" in plain
    assert b"then start again from your files as they are: promoter run --repo work" in plain


GATED = {"README.md": b"# project\n", "main.py": BASE, "notes.txt": NOTES}
IS_THE_APPROVAL = (
    b"gated requires approval: your yes is the approval, recorded for credential operator, "
    b"and promotes at once. "
)


@pytest.mark.gated(GATED)
def test_the_rest_of_a_conflict_cannot_pass_the_approval_gate_unasked(
    gated: Gated, tmp_path: Path
) -> None:
    """Under the approval gate the rest is held as any bundle: its question says that the
    yes is the approval, and a no there writes nothing."""
    daemon, repo, _ = gated
    term = _gated_run(gated, _agent(tmp_path), daemon.operator_token)
    at = term.expect(IS_THE_APPROVAL + PROMOTE)
    (repo / "main.py").write_bytes(CLASH)
    term.send(b"y\r")
    at = term.expect(IS_THE_APPROVAL + MERGE, at)
    term.send(b"y\r")
    at = term.expect(REST, at)
    term.send(b"y\r")
    term.expect(IS_THE_APPROVAL + PROMOTE, at)
    term.send(b"n\r")
    assert term.finish() == 75, term.text()  # not confirmed
    assert (repo / "main.py").read_bytes() == CLASH
    assert (repo / "notes.txt").read_bytes() == NOTES
    assert not (repo / "lib.py").exists()
    [step] = _record(daemon).steps
    assert (step.status, step.left_out) == ("declined", ["main.py"])


SLASHED = "back\\slash.py"  # one backslash on disk; the wire form doubles it
SLASHED_WIRE = "back\\\\slash.py"


@pytest.mark.repo(files={**FILES, SLASHED: BASE})
def test_a_conflicted_name_that_git_and_the_wire_spell_apart_stays_out_of_the_rest(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """The agent edits a file whose name git spells with one backslash and the wire with
    two; the person's save on it conflicts. The rest leaves it out whichever way it is
    spelled: the person's file is never written, the rest promotes lib.py only."""
    (tmp_path / "agent.py").write_bytes(AGENT)
    (tmp_path / "lib.py").write_bytes(LIB)
    script = f"cp {tmp_path / 'agent.py'} '{SLASHED}' && cp {tmp_path / 'lib.py'} lib.py"
    term = _run(daemon, repo, script)
    at = term.expect(PROMOTE)
    (repo / SLASHED).write_bytes(CLASH)
    term.send(b"y\r")
    at = term.expect(b"changed since the run began: merge your edit and the agent's? [Y/n]", at)
    term.send(b"y\r")
    at = term.expect(b"Promote the rest, without ", at)
    term.send(b"y\r")
    term.expect(PROMOTE, at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / SLASHED).read_bytes() == CLASH
    assert (repo / "lib.py").read_bytes() == LIB
    [step] = _record(daemon).steps
    assert (step.status, step.left_out) == ("completed", [SLASHED_WIRE])
    assert step.operation_id is not None
    assert _receipt_targets(daemon, step.operation_id) == {"lib.py": sha(LIB)}


def test_a_conflict_met_promoting_a_kept_bundle_names_the_rest_and_its_command(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """``--continue RUN`` without a command holds no credential to build the rest with:
    the conflict there names the rest and the command that offers it, asking nothing."""
    term = _run(daemon, repo, _agent(tmp_path))
    at = term.expect(PROMOTE)
    (repo / "main.py").write_bytes(CLASH)
    term.send(b"y\r")
    term.expect(MERGE, at)
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130, term.text()
    record = _record(daemon)
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv = [*CLI, "run", *where, "--continue", record.run_id, "--keep", "--unconfined"]
    again = Terminal(argv, repo, {"PAGER": "cat"})
    again.expect(MERGE)
    again.send(b"y\r")
    assert again.finish() == 75, again.text()  # merge_conflict
    assert (repo / "main.py").read_bytes() == CLASH
    assert not (repo / "lib.py").exists()
    plain = _one_line(again)
    assert b"Promote the rest" not in plain
    assert (
        b"the agent's other changes (lib.py, notes.txt) stay in the sandbox: promote them "
        b"without main.py at a terminal: promoter run --continue "
        + f"{record.run_id} --keep --unconfined -- true".encode()
    ) in plain
    assert [s.status for s in _record(daemon).steps] == ["merge_conflict"]


def test_ctrl_c_at_the_rest_question_names_the_command_that_offers_it_again(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent(tmp_path))
    at = _to_the_conflict(term, repo)
    term.expect(REST, at)
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130, term.text()
    assert (repo / "main.py").read_bytes() == CLASH
    assert not (repo / "lib.py").exists()
    record = _record(daemon)
    assert [s.status for s in record.steps] == ["merge_conflict"]
    plain = _one_line(term)
    assert b"ran at the host" not in plain
    assert (
        b"interrupted: nothing was promoted; the sandbox is kept: "
        + f"{record.clone}; the merge conflicted, your files as they are; the rest of the "
        f"agent's changes is offered again with promoter run --continue {record.run_id} "
        "--keep --unconfined -- true".encode()
    ) in plain
