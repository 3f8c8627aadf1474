"""The pure rules for links: the grant's target policy, the classifier, and escaped names."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest

from promoter.domain.documents import grant_sha256
from promoter.domain.links import target_problem
from promoter.domain.models import GrantV1
from promoter.domain.path_state import State, Verdict, classify
from promoter.domain.paths import wire_path

INSIDE_OK = [
    ("tests/certs/mtls/ca", b"../expired/ca"),
    ("a/b/l", b"../../README.md"),
    ("a/l", b".."),  # the worktree's root itself
    ("l", b"./x/./y"),
    ("a/l", b"b/../c"),
]
INSIDE_REFUSED = [
    ("l", b"..", "leaves the worktree"),
    ("a/l", b"../..", "leaves the worktree"),
    ("a/l", b"b/../../../x", "leaves the worktree"),
    ("l", b"/etc", "absolute"),
    ("l", b"/proc/self/root", "absolute"),
    ("l", b".git", "passes through .git"),
    ("a/l", b"../.Git/hooks/pre-commit", "passes through .git"),
    ("l", b"x/.GIT", "passes through .git"),
    ("l", b"", "empty"),
    ("l", b"a\x00b", "NUL"),
    ("l", b"x" * 4096, "more than 4095"),
]


@pytest.mark.parametrize(("path", "target"), INSIDE_OK)
def test_inside_allows_relative_targets_that_stay_in_the_worktree(path: str, target: bytes) -> None:
    assert target_problem(path, target, "inside") is None


@pytest.mark.parametrize(("path", "target", "why"), INSIDE_REFUSED)
def test_inside_refuses_each_hostile_target(path: str, target: bytes, why: str) -> None:
    problem = target_problem(path, target, "inside")
    assert problem is not None and why in problem


def test_none_refuses_every_link_and_any_only_the_impossible_ones() -> None:
    assert "symlinks: none" in (target_problem("l", b"x", "none") or "")
    assert target_problem("l", b"/proc/self/root", "any") is None
    assert target_problem("l", b"..", "any") is None
    assert "empty" in (target_problem("l", b"", "any") or "")


@dataclass(frozen=True)
class Leaf:
    kind: str
    sha256: str | None
    mode: str | None


def h(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_link_is_its_state_only_as_a_link_with_that_text() -> None:
    old = State(True, h(b"README.md"), "100644")
    new = State(True, h(b"README.md"), "120000")
    assert classify(Leaf("symlink", h(b"README.md"), "120000"), old, new).verdict == Verdict.NEW
    assert classify(Leaf("file", h(b"README.md"), "100644"), old, new).verdict == Verdict.OLD
    other = classify(Leaf("symlink", h(b"elsewhere"), "120000"), old, new)
    assert other.verdict == Verdict.NEITHER
    assert "target" in other.reason
    odd = classify(Leaf("directory", None, None), new, new)
    assert odd.reason == "the path is a directory, not a symbolic link"


def test_names_that_are_not_utf8_are_shown_escaped_and_valid_names_unchanged() -> None:
    assert wire_path(b"caf\xe9.txt".decode("utf-8", "surrogateescape")) == "caf\\xe9.txt"
    assert wire_path("docs/ünï/x") == "docs/ünï/x"


def test_the_default_policy_keeps_the_v1_grant_hash() -> None:
    document = {
        "schema": "GrantV1",
        "grant_id": "g",
        "repository_identity": "repo_" + "0" * 32,
        "branch": "refs/heads/main",
        "base_commit": "1" * 40,
        "base_tree": "2" * 40,
        "executor_run_id": "r",
        "workflow_id": "w",
        "stage": "s",
        "attempt": 1,
        "generation": 1,
        "resume_epoch": 0,
        "fence": 1,
        "not_before": "2026-01-01T00:00:00Z",
        "expires_at": "2026-01-02T00:00:00Z",
        "write_allowlist": [],
        "target_preconditions": [],
        "limits": {"max_changes": 1, "max_total_bytes": 1},
    }
    plain = GrantV1.model_validate(document)
    explicit = GrantV1.model_validate({**document, "symlinks": "none"})
    inside = GrantV1.model_validate({**document, "symlinks": "inside"})
    assert "symlinks" not in plain.wire()
    assert grant_sha256(plain) == grant_sha256(explicit) != grant_sha256(inside)
