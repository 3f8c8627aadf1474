"""Receipts as in-toto Statements (protocol: bundles#signed-receipts) and the offline ``--worktree``
comparison.

Statements are rebuilt by hand with rfc8785; the disk states are made in a tmp dir.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from pydantic import ValidationError

from promoter.domain.intoto import PromotionStatementV1, VerificationStatementV1
from promoter.engine.receipts.statement import statement_bytes, subjects_of
from promoter.engine.receipts.worktree import compare_targets
from promoter.errors import ReceiptInvalid
from tests.support.flows import jcs_sha, promotion_body


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sealed(document: dict[str, Any]) -> dict[str, Any]:
    return {**document, "receipt_sha256": jcs_sha(document)}


def promotion(targets: list[dict[str, Any]]) -> dict[str, Any]:
    return sealed(promotion_body(targets))


def target(path: str, data: bytes | None, mode: str = "100644") -> dict[str, Any]:
    if data is None:
        return {"path": path, "exists": False, "sha256": None, "mode": None}
    return {"path": path, "exists": True, "sha256": sha(data), "mode": mode}


def rollback(actuals: list[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
    return sealed(
        {
            "schema": "RollbackReceiptV1",
            "operation_id": "op_" + "1" * 32,
            "status": "rolled_back",
            "targets": [
                {"path": p, "result": "restored", "reason": "restored", "error": None, "actual": a}
                for p, a in actuals
            ],
            "removed_directories": [],
            "rolled_back_at": "2026-11-30T21:06:00Z",
        }
    )


def test_statement_wraps_the_receipt_bytes_unchanged() -> None:
    document = promotion([target("a.txt", b"a\n"), target("gone.txt", None)])
    data = bytes(rfc8785.dumps(document))
    body = statement_bytes(data)
    assert body == bytes(
        rfc8785.dumps(
            {
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [{"name": "a.txt", "digest": {"sha256": sha(b"a\n")}}],
                "predicateType": "urn:promoter:receipt:promotion:v1",
                "predicate": document,
            }
        )
    )
    assert data in body


def test_non_canonical_receipt_bytes_are_never_re_encoded() -> None:
    data = rfc8785.dumps(promotion([target("a.txt", b"a\n")])).replace(b",", b", ", 1)
    with pytest.raises(ReceiptInvalid, match="only canonical receipt bytes"):
        statement_bytes(data)


def test_a_promotion_that_only_deletes_names_its_bundle() -> None:
    document = promotion([target("gone.txt", None)])
    assert subjects_of(document) == [{"name": "bnd_" + "4" * 32, "digest": {"sha256": "4" * 64}}]


def test_a_rollback_without_content_names_the_receipt_itself() -> None:
    missing = {"kind": "missing", "exists": False, "sha256": None, "mode": None, "bytes": None}
    document = rollback([("new.txt", missing), ("unread.txt", None)])
    assert subjects_of(document) == [
        {"name": "op_" + "1" * 32, "digest": {"sha256": document["receipt_sha256"]}}
    ]


# --- --worktree ---------------------------------------------------------------------------------


def test_worktree_match_changed_missing_for_files_modes_links_and_deletions(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(tmp_path / "src/run.sh", 0o755)
    (tmp_path / "src/plain.txt").write_bytes(b"plain\n")
    (tmp_path / "src/link").symlink_to("plain.txt")
    (tmp_path / "dir.txt").mkdir()
    document = promotion(
        [
            target("src/run.sh", b"#!/bin/sh\n", "100755"),
            target("src/plain.txt", b"plain\n", "100755"),  # the mode differs
            target("src/link", b"plain.txt", "120000"),  # a link's content is its target
            target("gone.txt", None),
            target("dir.txt", b"x"),
            target("src/absent.txt", b"x"),
            target("nodir/absent.txt", b"x"),
        ]
    )
    found = {m.path: (m.status, m.found) for m in compare_targets(document, tmp_path)}
    script, plain = sha(b"#!/bin/sh\n"), sha(b"plain\n")
    assert found == {
        "src/run.sh": ("match", f"100755 {script}"),
        "src/plain.txt": ("changed", f"100644 {plain}"),
        "src/link": ("match", f"120000 {sha(b'plain.txt')}"),
        "gone.txt": ("match", "absent"),
        "dir.txt": ("changed", "directory"),
        "src/absent.txt": ("missing", "absent"),
        "nodir/absent.txt": ("missing", "absent"),
    }


def test_worktree_compares_a_rollback_with_what_it_found(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_bytes(b"old\n")
    found = {"kind": "file", "exists": True, "sha256": sha(b"old\n"), "mode": "100644", "bytes": 4}
    missing = {"kind": "missing", "exists": False, "sha256": None, "mode": None, "bytes": None}
    document = rollback([("kept.txt", found), ("new.txt", missing), ("unread.txt", None)])
    statuses = {m.path: m.status for m in compare_targets(document, tmp_path)}
    assert statuses == {"kept.txt": "match", "new.txt": "match", "unread.txt": "unknown"}


def test_worktree_needs_a_receipt_with_targets(tmp_path: Path) -> None:
    with pytest.raises(ReceiptInvalid, match="a PatchVerificationReceiptV1 has none"):
        compare_targets({"schema": "PatchVerificationReceiptV1"}, tmp_path)


def test_the_statement_parses_with_its_published_model() -> None:
    document = promotion([target("a.txt", b"a\n")])
    body = statement_bytes(bytes(rfc8785.dumps(document)))
    parsed = PromotionStatementV1.model_validate(json.loads(body))
    assert parsed.predicate.receipt_sha256 == document["receipt_sha256"]
    with pytest.raises(ValidationError):
        VerificationStatementV1.model_validate(json.loads(body))
