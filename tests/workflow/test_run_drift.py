"""P1: the person saves the file the agent changed, during ``promoter run`` and at its
question; and a link the grant's policy refuses, with the rest of the bundle offered.

The real CLI (``python -m promoter.cli.main``) runs from inside the guarded repository
(not the promoter checkout) on a real pseudo-terminal against a real daemon on a loopback
port, ``--unconfined`` so that no bubblewrap is needed. The person's save during the run
is deterministic: the agent's command writes its edit, then waits on a FIFO the test
opens only after it saved the person's edit into the worktree. The save at the question
lands when the question is on the terminal, before the answer. Every test asserts the
worktree's exact bytes.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from promoter.errors import ConfigError
from promoter.executor import sandbox as sandboxes
from tests.support import bwrap
from tests.support.daemon import Daemon
from tests.support.fixtures import Gated
from tests.support.flows import sha
from tests.support.promotion import git_dir_digest, tree_bytes

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "promoter.cli.main"]
BASE = b"".join(b"line %d\n" % n for n in range(1, 13))
AGENT = BASE.replace(b"line 2\n", b"line 2 by the agent\n")
PERSON = BASE.replace(b"line 11\n", b"line 11 by the person\n")
MERGED = AGENT.replace(b"line 11\n", b"line 11 by the person\n")
CLASH = BASE.replace(b"line 2\n", b"line 2 by the person\n")
EXTRA = b"a new file of the agent\n"
WAIT = 120.0  # a bound on a step that hangs, never a synchronization


class Terminal:
    """A command on a pseudo-terminal: its output collected, awaited, answered."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        base = {k: v for k, v in os.environ.items() if not k.startswith("PROMOTER_")}
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**base, "PYTHONPATH": str(ROOT), "TERM": "xterm", "COLUMNS": "300", **env},
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.output = b""
        self.closed = False
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                chunk = b""
            with self.changed:
                self.output += chunk
                self.closed = not chunk
                self.changed.notify_all()
            if not chunk:
                return

    def expect(self, text: bytes, after: int = 0) -> int:
        """Wait until ``text`` appears past offset ``after``; the offset past it."""
        with self.changed:
            found = self.changed.wait_for(
                lambda: text in self.output[after:] or self.closed, timeout=WAIT
            )
            at = self.output.find(text, after)
            assert found and at >= 0, self.text()
            return at + len(text)

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def finish(self) -> int:
        code = self.proc.wait(timeout=WAIT)
        self.reader.join(WAIT)
        os.close(self.master)
        return code

    def text(self) -> str:
        return self.output.decode(errors="replace")

    @property
    def plain(self) -> bytes:
        """The output without terminal styling and carriage returns."""
        return re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\r", b"", self.output)


pytestmark = pytest.mark.repo(files={"README.md": b"# project\n", "src/app.py": BASE})


def _run(daemon: Daemon, repo: Path, script: str, *extra: str, keep: bool = True) -> Terminal:
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--repo", "work", "--unconfined", *(["--keep"] if keep else []), *extra]
    argv += ["--", "sh", "-c", script]
    return Terminal(argv, repo, {"PAGER": "cat"})


def _agent_files(tmp_path: Path, content: bytes = AGENT) -> str:
    """The agent's script: its edit of src/app.py and a new file."""
    (tmp_path / "agent.py").write_bytes(content)
    (tmp_path / "extra.py").write_bytes(EXTRA)
    return f"cp {tmp_path / 'agent.py'} src/app.py && cp {tmp_path / 'extra.py'} src/extra.py"


def _pausing_agent(tmp_path: Path) -> tuple[str, Path, Path]:
    """The agent's script, which then says so on one FIFO and waits on another."""
    ready, go = tmp_path / "ready.fifo", tmp_path / "go.fifo"
    os.mkfifo(ready)
    os.mkfifo(go)
    return f"{_agent_files(tmp_path)} && echo edited > {ready} && read x < {go}", ready, go


def _save_while_the_agent_waits(ready: Path, go: Path, repo: Path, person: bytes) -> None:
    """Wait for the agent's word, save the person's edit, let the agent finish."""
    heard: list[bytes] = []
    listener = threading.Thread(target=lambda: heard.append(ready.read_bytes()), daemon=True)
    listener.start()
    listener.join(WAIT)
    assert heard == [b"edited\n"], "the agent never reached its pause"
    (repo / "src" / "app.py").write_bytes(person)
    go.write_bytes(b"go\n")


def _record(daemon: Daemon) -> sandboxes.RunRecord:
    (record,) = sandboxes.list_runs(daemon.state_dir)
    return record


def _receipt_targets(daemon: Daemon, operation_id: str) -> dict[str, str]:
    with daemon.orchestrator() as orch:
        answer = orch.get(f"/v1/operations/{operation_id}/receipt")
    assert answer.status_code == 200, answer.text
    return {t["path"]: t["sha256"] for t in answer.json()["targets"]}


QUESTION = b"src/app.py changed since the run began: merge your edit and the agent's? [Y/n]"


def test_a_save_during_the_run_is_merged_with_the_agents_edit_and_promoted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    script, ready, go = _pausing_agent(tmp_path)
    term = _run(daemon, repo, script)
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    at = term.expect(b"preflight refused")
    term.expect(QUESTION, at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    record = _record(daemon)
    [step] = record.steps
    assert step.status == "completed"
    assert step.operation_id is not None
    assert _receipt_targets(daemon, step.operation_id) == {
        "src/app.py": sha(MERGED),
        "src/extra.py": sha(EXTRA),
    }
    assert b"merged your edit and the agent's into bundle" in term.plain
    assert b"+line 2 by the agent" in term.plain[term.plain.find(b"merged your edit") :]
    assert b"promoted: operation" in term.plain


def test_no_step_chains_on_a_merge_which_would_undo_the_persons_edit(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """The sandbox holds the agent's file, not the merged one: a step built there against
    the merged bytes would promote the agent's file back over the person's edit."""
    script, ready, go = _pausing_agent(tmp_path)
    term = _run(daemon, repo, script)  # --keep
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    term.expect(QUESTION)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    record = _record(daemon)
    plain = b" ".join(term.plain.split())
    assert b"next step in the same sandbox" not in plain
    assert (
        b"your edit was merged, and the sandbox does not hold it: the next step is a new "
        b"run: promoter run --repo work -- CMD"
    ) in plain
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv = [*CLI, "run", *where, "--continue", record.run_id, "--unconfined", "--yes"]
    again = Terminal([*argv, "--", "sh", "-c", "echo more >> src/extra.py"], repo, {})
    assert again.finish() == 75, again.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED  # the person's edit stays
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    assert b"[target_drift]" in again.plain
    assert b"start a new run from your files as they are: promoter run --repo work" in (
        b" ".join(again.plain.split())
    )
    assert [s.status for s in _record(daemon).steps] == ["completed"]


def test_a_save_at_the_question_is_merged_with_the_agents_edit_and_promoted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent_files(tmp_path))
    at = term.expect(b"Promote these changes into the worktree?")
    (repo / "src" / "app.py").write_bytes(PERSON)  # saved while the question waits
    term.send(b"y\r")
    term.expect(QUESTION, at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    [step] = _record(daemon).steps
    assert step.status == "completed" and step.operation_id is not None
    assert _receipt_targets(daemon, step.operation_id)["src/app.py"] == sha(MERGED)


def test_a_conflicting_save_writes_nothing_in_the_worktree_and_names_the_marked_file(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent_files(tmp_path))
    at = term.expect(b"Promote these changes into the worktree?")
    (repo / "src" / "app.py").write_bytes(CLASH)
    before = tree_bytes(repo), git_dir_digest(repo)
    term.send(b"y\r")
    at = term.expect(QUESTION, at)
    term.send(b"y\r")
    term.expect(b"Promote the rest, without src/app.py? [Y/n]", at)  # src/extra.py
    term.send(b"n\r")
    assert term.finish() == 75, term.text()  # merge_conflict
    assert (tree_bytes(repo), git_dir_digest(repo)) == before  # not a byte of the worktree
    record = _record(daemon)
    [step] = record.steps
    assert step.status == "merge_conflict"
    named = re.search(rb"both edits with markers in (\S+)", term.plain)
    assert named is not None, term.text()
    marked = Path(named.group(1).decode())
    assert marked.parent.parent.parent == Path(record.clone).parent / "conflicts"
    text = marked.read_bytes()
    assert b"<<<<<<<" in text and b"line 2 by the person\n" in text
    assert b"line 2 by the agent\n" in text and b">>>>>>>" in text
    assert b"nothing in your worktree changed" in term.plain
    assert term.plain.count(b"next: resolve the markers") == 1  # in the error only
    assert b"[merge_conflict] the merge has conflicts" in term.plain


def test_with_yes_a_clean_merge_is_held_for_a_persons_approval(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    script, ready, go = _pausing_agent(tmp_path)
    term = _run(daemon, repo, script, "--yes")
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == PERSON  # --yes is not a person
    [step] = _record(daemon).steps
    assert step.status == "awaiting_approval" and step.operation_id is not None
    assert f"promoter approve {step.operation_id}".encode() in term.plain
    with daemon.operator() as op:
        done = op.post(f"/v1/operations/{step.operation_id}/approve", json={"wait": True})
    assert done.json()["status"] == "completed", done.text
    assert (repo / "src" / "app.py").read_bytes() == MERGED


def test_declining_the_merge_keeps_the_persons_file_and_names_the_drift(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    script, ready, go = _pausing_agent(tmp_path)
    term = _run(daemon, repo, script)
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    term.expect(QUESTION)
    term.send(b"n\r")
    assert term.finish() == 75, term.text()  # target_drift
    assert (repo / "src" / "app.py").read_bytes() == PERSON
    assert not (repo / "src" / "extra.py").exists()
    assert b"[target_drift]" in term.plain and b"src/app.py" in term.plain
    assert term.plain.count(b"drifted: src/app.py") == 1  # above the question, once


def test_ctrl_c_at_the_merge_question_names_a_remedy_that_offers_the_merge_again(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    script, ready, go = _pausing_agent(tmp_path)
    term = _run(daemon, repo, script)
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    term.expect(QUESTION)
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130, term.text()
    assert (repo / "src" / "app.py").read_bytes() == PERSON
    record = _record(daemon)
    [step] = record.steps
    plain = b" ".join(term.plain.split())
    remedy = f"promoter run --continue {record.run_id} --keep"  # as the step was given
    assert (
        f"bundle {step.bundle_id} stays submitted: the merge of your edit and the agent's "
        f"is offered again with {remedy}"
    ).encode() in plain
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    again = Terminal([*CLI, "run", *where, *remedy.split()[2:]], repo, {"PAGER": "cat"})
    again.expect(QUESTION)
    again.send(b"y\r")
    assert again.finish() == 0, again.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    assert b"promoted: operation" in again.plain
    assert [s.status for s in _record(daemon).steps] == ["completed"]  # and kept


def test_a_refused_link_offers_the_rest_which_is_promoted_without_it(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    script = f"{_agent_files(tmp_path)} && ln -s ../../outside src/link"
    term = _run(daemon, repo, script, keep=False)
    at = term.expect(b"Promote the rest, without src/link? [Y/n]")
    term.send(b"y\r")
    term.expect(b"Promote these changes into the worktree?", at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert b"the grant's policy is symlinks: none" in term.plain
    assert b"--symlinks inside" in term.plain
    assert (repo / "src" / "app.py").read_bytes() == AGENT
    assert (repo / "src" / "extra.py").read_bytes() == EXTRA
    assert not os.path.lexists(repo / "src" / "link")
    record = _record(daemon)
    [step] = record.steps
    assert (step.status, step.left_out) == ("completed", ["src/link"])
    assert step.operation_id is not None
    assert set(_receipt_targets(daemon, step.operation_id)) == {"src/app.py", "src/extra.py"}
    # the sandbox stays, the link in it, for --symlinks inside later
    assert os.readlink(Path(record.clone) / "src" / "link") == "../../outside"
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    listed = Terminal([*CLI, "run", "--list", *where], repo, {})
    assert listed.finish() == 0, listed.text()
    assert f"{record.run_id}  work  1 step(s), last completed, without src/link  ".encode() in (
        listed.plain
    )


def test_a_refused_link_with_yes_submits_nothing_and_names_the_setting(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    before = tree_bytes(repo)
    term = _run(daemon, repo, "ln -s ../../outside src/link && echo x > src/x.py", "--yes")
    assert term.finish() == 75, term.text()  # path_unsafe
    assert tree_bytes(repo) == before
    assert b"[path_unsafe]" in term.plain
    assert b"symlinks: none" in term.plain and b"--symlinks inside" in term.plain
    [step] = _record(daemon).steps
    assert step.bundle_id is None


def test_a_refused_link_ends_its_step_refused_never_interrupted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """Links refused under ``--yes`` (and answered no at the terminal) end the step
    ``refused``: ``run --list`` names it so, never ``interrupted``, and ``--prune`` keeps
    it as a refused step, untouched for less than a day."""
    term = _run(daemon, repo, "ln -s ../../outside src/link", "--yes")
    assert term.finish() == 75, term.text()  # path_unsafe
    record = _record(daemon)
    [step] = record.steps
    assert (step.status, step.bundle_id, step.code) == ("refused", None, "path_unsafe")
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]
    listed = Terminal([*CLI, "run", "--list", *where], repo, {})
    assert listed.finish() == 0, listed.text()
    assert f"{record.run_id}  work  1 step(s), last refused (path_unsafe)  ".encode() in (
        listed.plain
    )
    pruned = Terminal([*CLI, "run", "--prune", *where], repo, {})
    assert pruned.finish() == 0, pruned.text()
    kept = f"{record.run_id}  kept: last refused, untouched for less than a day "
    assert kept.encode() in pruned.plain
    assert os.readlink(Path(record.clone) / "src" / "link") == "../../outside"
    argv = [*CLI, "run", *where, "--continue", record.run_id, "--unconfined", "--keep"]
    again = Terminal([*argv, "--", "true"], repo, {"PAGER": "cat"})
    again.expect(b"Promote the rest, without src/link? [Y/n]")
    again.send(b"n\r")
    assert again.finish() == 75, again.text()
    assert [s.status for s in _record(daemon).steps] == ["refused", "refused"]


def test_symlinks_inside_promotes_a_link_that_stays_inside(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, "ln -s app.py src/alias", "--yes", "--symlinks", "inside")
    assert term.finish() == 0, term.text()
    assert os.readlink(repo / "src" / "alias") == "app.py"


def test_confined_a_save_during_the_run_is_merged_with_the_agents_edit_and_promoted(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """The same under bubblewrap: the agent waits for a line on its terminal."""
    bwrap.confining()
    agent = AGENT.decode().replace("\n", "\\n")
    script = f"printf '{agent}' > src/app.py && echo agent-waits && read x && echo agent-goes"
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--repo", "work", "--keep", "--", "sh", "-c", script]
    term = Terminal(argv, repo, {"PAGER": "cat"})
    at = term.expect(b"agent-waits")
    (repo / "src" / "app.py").write_bytes(PERSON)
    term.send(b"go\r")
    term.expect(QUESTION, at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert b"confined by bubblewrap" in term.plain
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    [step] = _record(daemon).steps
    assert (step.status, step.confinement) == ("completed", "bwrap")


def test_a_save_at_the_question_declined_names_the_path_and_the_merge(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent_files(tmp_path))
    at = term.expect(b"Promote these changes into the worktree?")
    (repo / "src" / "app.py").write_bytes(PERSON)
    term.send(b"y\r")
    term.expect(QUESTION, at)
    term.send(b"n\r")
    assert term.finish() == 75, term.text()  # target_drift
    assert (repo / "src" / "app.py").read_bytes() == PERSON
    assert not (repo / "src" / "extra.py").exists()
    [step] = _record(daemon).steps
    assert step.status == "refused" and step.operation_id is not None
    plain = b" ".join(term.plain.split())
    assert (
        f"drifted: src/app.py: reads 100644 sha256:{sha(PERSON)[:12]} ({len(PERSON)} bytes) "
        f"now, expected 100644 sha256:{sha(BASE)[:12]} (the worktree file is neither the old "
        "nor the new state: the content differs from both)"
    ).encode() in plain
    assert plain.count(b"drifted: src/app.py") == 1  # above the question, once
    assert f"promoter merge {step.operation_id}".encode() in plain
    assert b"[target_drift] src/app.py changed since the run began" in plain


def test_a_bad_symlinks_setting_is_refused_before_a_sandbox_exists(
    daemon: Daemon, repo: Path
) -> None:
    term = _run(daemon, repo, "true", "--symlinks", "outside")
    assert term.finish() == ConfigError.exit_code, term.text()
    assert b"[config_error] --symlinks must be one of none, inside, any" in b" ".join(
        term.plain.split()
    )
    assert sandboxes.list_runs(daemon.state_dir) == []


SPOOF = "src/evil\u202etxt.exe\u200b.py"  # reads "src/evilyp.\u200bexe.txt"
SPOOF_SHOWN = b"src/evil<U+202E>txt.exe<U+200B>.py"


@pytest.mark.repo(files={"README.md": b"# project\n", SPOOF: BASE})
def test_a_drifted_name_with_bidi_controls_cannot_pose_at_the_merge_question(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    """The agent edits a file whose name holds U+202E and U+200B, the person saves it
    meanwhile: the drift line, the merge's question and the refusal name it with both
    shown as ``<U+XXXX>``, never raw at the person's terminal."""
    ready, go = tmp_path / "ready.fifo", tmp_path / "go.fifo"
    os.mkfifo(ready)
    os.mkfifo(go)
    (tmp_path / "agent.py").write_bytes(AGENT)
    script = f"cp {tmp_path / 'agent.py'} '{SPOOF}' && echo edited > {ready} && read x < {go}"
    term = _run(daemon, repo, script)
    heard: list[bytes] = []
    listener = threading.Thread(target=lambda: heard.append(ready.read_bytes()), daemon=True)
    listener.start()
    listener.join(WAIT)
    assert heard == [b"edited\n"], "the agent never reached its pause"
    (repo / SPOOF).write_bytes(PERSON)
    go.write_bytes(b"go\n")
    term.expect(SPOOF_SHOWN + b" changed since the run began: merge your edit and the agent's?")
    term.send(b"n\r")
    assert term.finish() == 75, term.text()  # target_drift
    assert (repo / SPOOF).read_bytes() == PERSON
    assert b"drifted: " + SPOOF_SHOWN + b": reads" in term.plain
    assert SPOOF_SHOWN + b" changed since the run began (shown above)" in term.plain
    told = term.plain[term.plain.index(b"drifted: ") :]  # above it, the person's own command
    assert "\u202e".encode() not in told and "\u200b".encode() not in told


def test_run_list_shows_a_refused_step_merged_and_approved_by_the_persons_commands(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    term = _run(daemon, repo, _agent_files(tmp_path))
    at = term.expect(b"Promote these changes into the worktree?")
    (repo / "src" / "app.py").write_bytes(PERSON)
    term.send(b"y\r")
    term.expect(QUESTION, at)
    term.send(b"n\r")  # the merge declined here, asked for with promoter merge below
    assert term.finish() == 75, term.text()
    [step] = _record(daemon).steps
    assert step.status == "refused" and step.operation_id is not None
    refused = step.operation_id
    token = [
        "--url",
        daemon.url,
        "--token-file",
        str(daemon.state_dir / "credentials" / "operator.token"),
    ]
    where = ["--state-dir", str(daemon.state_dir), "--url", daemon.url]

    def cli(*argv: str) -> Terminal:
        done = Terminal([*CLI, *argv], repo, {})
        assert done.finish() == 0, done.text()
        return done

    merge = cli("merge", refused, *token)
    held = re.search(rb"operation (op_[0-9a-f]+) awaiting_approval", merge.plain)
    assert held is not None, merge.text()
    listed = cli("run", "--list", *where)
    assert b"1 step(s), last awaiting approval" in listed.plain, listed.text()
    cli("approve", held.group(1).decode(), "--note", "merged by hand", *token)
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    listed = cli("run", "--list", *where)
    assert b"1 step(s), last completed" in listed.plain, listed.text()
    [step] = _record(daemon).steps
    assert (step.status, step.operation_id) == ("completed", held.group(1).decode())
    assert step.bundle_id is not None and step.bundle_id in merge.text()
    again = [*CLI, "run", *where, "--continue", _record(daemon).run_id, "--unconfined", "--yes"]
    chained = Terminal([*again, "--", "sh", "-c", "echo more >> src/extra.py"], repo, {})
    assert chained.finish() == 75, chained.text()  # no step chains on the merged promotion
    assert b"merged your edit with the agent's" in b" ".join(chained.plain.split())
    assert (repo / "src" / "app.py").read_bytes() == MERGED


GATED = {"README.md": b"# project\n", "src/app.py": BASE}
IS_THE_APPROVAL = (
    b"gated requires approval: your yes is the approval, recorded for credential operator, "
    b"and promotes at once. "
)
ONLY_ASKS = (
    b"gated requires approval: your yes only asks for it; nothing is written until an "
    b"operator approves. "
)


def _gated_run(gated: Gated, script: str, token: str) -> Terminal:
    """``promoter run`` at a terminal in the gated repository, with ``token``'s credential."""
    daemon, repo, _ = gated
    (repo.parent / "person.token").write_text(token)
    (repo.parent / "person.token").chmod(0o600)
    argv = [*CLI, "run", "--state-dir", str(daemon.state_dir), "--url", daemon.url]
    argv += ["--token-file", str(repo.parent / "person.token"), "--repo", "gated", "--keep"]
    return Terminal([*argv, "--unconfined", "--", "sh", "-c", script], repo, {"PAGER": "cat"})


@pytest.mark.gated(GATED)
def test_the_merge_question_under_the_gate_says_that_yes_is_the_approval(
    gated: Gated, tmp_path: Path
) -> None:
    """Under the approval gate, with the person's operator credential, the merge's question
    says what the plain question says: the yes approves, recorded for that credential,
    and promotes at once; and so it does."""
    daemon, repo, _ = gated
    script, ready, go = _pausing_agent(tmp_path)
    before = _whoami_asked(daemon)
    term = _gated_run(gated, script, daemon.operator_token)
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    term.expect(IS_THE_APPROVAL + QUESTION)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED
    [step] = _record(daemon).steps
    assert step.status == "completed"
    # the gate, the approval after it and the merge's credential: one answer, asked once
    assert _whoami_asked(daemon) == before + 1


def _whoami_asked(daemon: Daemon) -> float:
    from tests.workflow.test_run_command import _requests

    return _requests(daemon).get(("GET", "/v1/whoami"), 0.0)


@pytest.mark.gated(GATED)
def test_the_merge_question_under_the_gate_says_that_yes_only_asks_without_an_operator(
    gated: Gated, tmp_path: Path
) -> None:
    """Under the approval gate, with a credential that is not an operator's, the merge's
    question says that the yes only asks; nothing is written, the step awaits approval."""
    daemon, repo, _ = gated
    script, ready, go = _pausing_agent(tmp_path)
    term = _gated_run(gated, script, daemon.orchestrator_token)
    _save_while_the_agent_waits(ready, go, repo, PERSON)
    term.expect(ONLY_ASKS + QUESTION)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == PERSON
    assert not (repo / "src" / "extra.py").exists()
    [step] = _record(daemon).steps
    assert step.status == "awaiting_approval"
    assert f"awaiting approval: promoter approve {step.operation_id}".encode() in term.plain


@pytest.mark.gated(GATED)
def test_the_merge_question_after_a_save_at_the_gated_question_says_what_yes_does(
    gated: Gated, tmp_path: Path
) -> None:
    """The person saves while the gated question waits and approves: the approved
    promotion is refused on the drift, and the merge's question then says, as the first
    did, that the yes is the approval."""
    daemon, repo, _ = gated
    term = _gated_run(gated, _agent_files(tmp_path), daemon.operator_token)
    at = term.expect(IS_THE_APPROVAL + b"Promote these changes into the worktree?")
    (repo / "src" / "app.py").write_bytes(PERSON)  # saved while the question waits
    term.send(b"y\r")
    term.expect(IS_THE_APPROVAL + QUESTION, at)
    term.send(b"y\r")
    assert term.finish() == 0, term.text()
    assert (repo / "src" / "app.py").read_bytes() == MERGED
