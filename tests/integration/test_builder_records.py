"""The builder's plain records give the bytes its models gave: same bundles, same hashes.

Each bundle is built twice in one process, once from the grant model (and a chained base
of ``FileState`` models) and once from the grant file as ``bundle build`` reads it (a
``GrantRecord``); both are compared, byte for byte, with the document the models make of
the same changes (``Change``, ``FileState.of``/``missing``, ``grant_sha256`` of the model),
sealed as the builder seals. The records' own forms are compared with the models' too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from promoter.domain import wirecheck
from promoter.domain.bundle_records import ChangeRecord, GrantRecord, StateRecord, grant_record
from promoter.domain.canonical import canonical_bytes
from promoter.domain.documents import grant_sha256, seal_bundle, sealed_grant
from promoter.domain.models import Change, FileState, GrantV1, PatchBundleV1
from promoter.domain.wirecheck import problem
from promoter.errors import ValidationFailed
from promoter.executor import build_bundle, builder, handover
from promoter.executor.handover import grant_from_file
from tests.gitutil import commit_all, git
from tests.property.test_wirecheck_differential import _rich_grant
from tests.support.flows import make_grant
from tests.unit.test_signing import grant as plain_grant

IDENTITY = "repo_" + "0" * 32
CREATED = "2026-01-02T03:04:05Z"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for rel, data in {"src/app.py": b"v1\n", "src/gone.txt": b"gone\n", "bin/t": b"t\n"}.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    commit_all(path, "base")
    return path


@pytest.fixture
def executor(tmp_path: Path, source: Path) -> Path:
    git(tmp_path, "clone", "-q", str(source), str(tmp_path / "executor"))
    work = tmp_path / "executor"
    (work / "src/app.py").write_bytes(b"v2\n")
    (work / "src/gone.txt").unlink()
    os.chmod(work / "bin/t", 0o755)
    (work / "new/deep").mkdir(parents=True)
    (work / "new/deep/x.bin").write_bytes(bytes(range(256)))
    (work / "empty").write_bytes(b"")
    os.symlink("../src/app.py", work / "new/link")
    return work


def _model_state(state: dict[str, Any]) -> FileState:
    if not state["exists"]:
        return FileState.missing()
    return FileState.of(state["sha256"], state["mode"], state["bytes"])


def _by_models(bundle: dict[str, Any], grant: GrantV1) -> bytes:
    """The sealed document the models make of ``bundle``'s changes under ``grant``."""
    changes = [
        Change(
            path=c["path"],
            operation=c["operation"],
            old=_model_state(c["old"]),
            new=_model_state(c["new"]),
        )
        for c in bundle["changes"]
    ]
    document = {
        "schema": "PatchBundleV1",
        "bundle_id": "",
        "bundle_sha256": "",
        "grant_id": grant.grant_id,
        "grant_sha256": grant_sha256(grant),
        "executor_run_id": grant.executor_run_id,
        "repository_identity": grant.repository_identity,
        "base_commit": grant.base_commit,
        "base_tree": grant.base_tree,
        "changes": [change.wire() for change in changes],
        "change_count": len(changes),
        "total_bytes": sum(c.new.bytes or 0 for c in changes if c.new.exists),
        "created_at": CREATED,
    }
    sealed = seal_bundle(document)
    assert PatchBundleV1.model_validate(sealed).wire()["changes"] == sealed["changes"]
    return canonical_bytes(sealed)


def _file(tmp_path: Path, grant: GrantV1, *, every_field: bool) -> Path:
    path = tmp_path / "grant.json"
    text = grant.model_dump_json(by_alias=True) if every_field else json.dumps(grant.wire())
    path.write_text(text)
    return path


@pytest.mark.parametrize("every_field", [False, True])
@pytest.mark.parametrize(
    "extra",
    [
        {"symlinks": "inside"},
        {"symlinks": "any", "approval": "required", "base_operation": "op_" + "c" * 32},
    ],
)
def test_a_grant_file_builds_the_bytes_the_models_build(
    tmp_path: Path, source: Path, executor: Path, extra: dict[str, Any], every_field: bool
) -> None:
    model = sealed_grant(GrantV1.model_validate(make_grant(source, IDENTITY, **extra)))
    record = grant_from_file(_file(tmp_path, model, every_field=every_field))
    assert isinstance(record, GrantRecord)
    with build_bundle(executor, model, created_at=CREATED) as built:
        from_model = canonical_bytes(built.bundle)
        expected = _by_models(built.bundle, model)
    with build_bundle(executor, record, created_at=CREATED) as built:
        from_record = canonical_bytes(built.bundle)
        operations = sorted(c["operation"] for c in built.bundle["changes"])
    assert from_record == from_model == expected
    assert operations == ["create", "create", "create", "delete", "modify", "modify"]


def test_a_chained_base_of_models_or_records_gives_the_same_bytes(
    tmp_path: Path, source: Path, executor: Path
) -> None:
    document = make_grant(source, IDENTITY, symlinks="inside")
    model = sealed_grant(GrantV1.model_validate(document))
    record = grant_from_file(_file(tmp_path, model, every_field=False))
    sha = "e" * 64
    # the chain left other content at src/app.py and a file the worktree does not hold
    since_models = {
        "src/app.py": FileState.of(sha, "100644", 3),
        "elsewhere.txt": FileState.of(sha, "100755", 3),
        "bin/t": FileState.missing(),
    }
    since_records = {p: StateRecord.from_state(s) for p, s in since_models.items()}
    with build_bundle(executor, model, created_at=CREATED, since=since_models) as built:
        from_model = canonical_bytes(built.bundle)
        expected = _by_models(built.bundle, model)
        paths = [c["path"] for c in built.bundle["changes"]]
    with build_bundle(executor, record, created_at=CREATED, since=since_records) as built:
        from_record = canonical_bytes(built.bundle)
    assert from_record == from_model == expected
    assert "elsewhere.txt" in paths


def test_a_refused_grant_file_is_worded_by_the_model(tmp_path: Path) -> None:
    document = {**plain_grant(), "fence": True}
    path = tmp_path / "grant.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValidationFailed) as caught:
        grant_from_file(path)
    assert caught.value.detail == "GrantV1: fence: Input should be a valid integer"


@pytest.mark.parametrize("document", [plain_grant(), _rich_grant()])
def test_the_grant_record_is_the_models_wire_and_hash(document: dict[str, Any]) -> None:
    model = GrantV1.model_validate(document)
    for form in (document, model.model_dump(mode="json", by_alias=True), model.wire()):
        assert problem("GrantV1", form) is None
        record = grant_record(form)
        assert record.wire() == model.wire()
        assert grant_sha256(record) == grant_sha256(model)
        assert record.write_allowlist[0].operations == tuple(model.write_allowlist[0].operations)
        assert [p.old.sha256 for p in record.target_preconditions] == [
            p.old.sha256 for p in model.target_preconditions
        ]


@given(
    sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
    mode=st.sampled_from(["100644", "100755", "120000"]),
    size=st.integers(min_value=0, max_value=2**53 - 1),
)
def test_a_state_record_is_the_models_file_state(sha256: str, mode: str, size: int) -> None:
    model = FileState.of(sha256, mode, size)
    record = StateRecord.of(sha256, mode, size)
    assert record.wire() == model.wire()
    assert StateRecord.from_state(model) == record
    assert StateRecord.missing().wire() == FileState.missing().wire()
    assert record.same_content(model) and not record.same_content(FileState.missing())


def test_a_big_bundle_is_checked_by_the_model_and_keeps_its_bytes(
    tmp_path: Path, source: Path, executor: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = sealed_grant(GrantV1.model_validate(make_grant(source, IDENTITY, symlinks="inside")))
    record = grant_from_file(_file(tmp_path, model, every_field=False))
    with build_bundle(executor, record, created_at=CREATED) as built:
        small = canonical_bytes(built.bundle)
    monkeypatch.setattr(builder, "VALIDATOR_MAX_CHANGES", 1)
    monkeypatch.setattr(wirecheck, "problem", _never)
    with build_bundle(executor, record, created_at=CREATED) as built:
        assert canonical_bytes(built.bundle) == small


def _never(name: str, document: Any) -> str | None:
    raise AssertionError(f"the validator was asked about a {name}")


def test_a_sealed_document_the_validator_refuses_is_refused_in_the_models_words(
    source: Path,
) -> None:
    record = grant_record(make_grant(source, IDENTITY))
    gitlink = StateRecord.of("d" * 64, "160000", 1)  # a mode no FileState holds
    change = ChangeRecord("sub", "create", StateRecord.missing(), gitlink)
    with pytest.raises(ValidationError) as caught:
        builder.seal_changes(record, [change], {}, cast(Any, None), created_at=CREATED)
    assert [e["loc"] for e in caught.value.errors()] == [("changes", 0, "new", "mode")]


def test_a_base_state_is_a_record_only_when_it_gives_back_its_exact_document() -> None:
    present = FileState.of("d" * 64, "100755", 3).wire()
    for state in (present, FileState.missing().wire()):
        record = handover._state_record(state)
        assert record is not None and record.wire() == state
    for odd in (
        {**present, "bytes": True},
        {**present, "blob_ref": None},
        {**present, "extra": 1},
        {**present, "exists": 1},
        {**FileState.missing().wire(), "mode": "100644"},
        [present],
    ):
        assert handover._state_record(odd) is None
        with pytest.raises(ValidationError):
            FileState.model_validate(odd)
