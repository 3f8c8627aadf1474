"""What an agent inside a sandbox may ask the host: the tools behind ``promoter mcp``.

``AgentTools`` holds one client with the executor's token (``PROMOTER_URL``,
``PROMOTER_TOKEN``) and answers four questions, each as a JSON object:
``submit_worktree`` builds the bundle of a worktree against its grant (``PROMOTER_GRANT``
by default; for a chained grant against the state its base promotion left), uploads the
missing blobs and submits it, returning the verification receipt, or the refusal with
every offending path when the builder or the host refuses; ``promotion_status`` lists a
bundle's promotions; ``bundle_diff`` the diff the host built from the stored blobs (a
page of it, for one path if asked, from a cursor);
``preflight`` the host's read-back of the real worktree, which needs the orchestrator's
token given explicitly (``PROMOTER_ORCHESTRATOR_TOKEN``).

Inside ``promoter run`` two more variables say where the sandbox started and where to
leave word of a submission: ``PROMOTER_START_TREE`` (the person's worktree state the
sandbox started from: the bundle's old states are taken from it) and
``PROMOTER_SUBMITTED_FILE`` (a file in the sandbox where ``submit_worktree`` writes the
submitted bundle's id and grant, so that ``run`` promotes that very bundle once it has
rebuilt it and found it equal; the file is a pointer, never trusted for content).

Deliberately not here: promoting, approving, registering grants or leases. No tool does
any of that; an executor's token could not, and the orchestrator's token is used for the
preflight only. Host errors are answers (``status: "refused"``), never exceptions, so an
agent always gets the code and detail.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from promoter.client.sync import PromoterClient
from promoter.errors import PromoterError
from promoter.executor.builder import build_bundle
from promoter.executor.handover import submitted_receipt

__all__ = ["AgentTools"]


def refusal(exc: PromoterError) -> dict[str, Any]:
    """A host or builder error as an answer: code, detail and what it names."""
    answer: dict[str, Any] = {"status": "refused", "code": exc.code, "detail": exc.detail}
    for name in ("paths", "verification_receipt", "failed_checks"):
        if name in exc.context:
            answer[name] = exc.context[name]
    return answer


class AgentTools:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        grant_id: str | None = None,
        worktree: Path | None = None,
        orchestrator_token: str | None = None,
    ) -> None:
        self.client = PromoterClient(url, token)
        self.grant_id = grant_id
        self.worktree = worktree or Path.cwd()
        self.orchestrator_token = orchestrator_token
        self.start_tree = os.environ.get("PROMOTER_START_TREE") or None
        self.submitted_file = os.environ.get("PROMOTER_SUBMITTED_FILE") or None

    def close(self) -> None:
        self.client.close()

    def submit_worktree(
        self, worktree: str | None = None, grant_id: str | None = None
    ) -> dict[str, Any]:
        grant_name = grant_id or self.grant_id
        if not grant_name:
            return {"status": "refused", "code": "config_error", "detail": "no grant id given"}
        try:
            grant = self.client.get_grant(grant_name)
            since = self.client.grant_base(grant.grant_id) if grant.base_operation else None
            with build_bundle(
                Path(worktree) if worktree else self.worktree,
                grant,
                since=since,
                start_tree=self.start_tree,
            ) as built:
                changes = [
                    {"path": c["path"], "operation": c["operation"]}
                    for c in built.bundle["changes"]
                ]
                if not changes:
                    return {"status": "no_changes", "grant_id": grant.grant_id, "changes": []}
                receipt = submitted_receipt(self.client, built)
                bundle_id = built.bundle_id
        except PromoterError as exc:
            return refusal(exc)
        self._leave_word(bundle_id, grant.grant_id)
        return {
            "status": "submitted",
            "bundle_id": bundle_id,
            "grant_id": grant.grant_id,
            "base_operation": grant.base_operation,
            "changes": changes,
            "verification_receipt": receipt,
        }

    def _leave_word(self, bundle_id: str, grant_id: str) -> None:
        """Tell ``promoter run`` which bundle was submitted (best effort: a pointer only)."""
        if self.submitted_file is None:
            return
        target = Path(self.submitted_file)
        temp = target.with_name(target.name + ".tmp")
        try:
            temp.write_text(json.dumps({"bundle_id": bundle_id, "grant_id": grant_id}) + "\n")
            os.replace(temp, target)
        except OSError:
            pass

    def promotion_status(self, bundle_id: str) -> dict[str, Any]:
        try:
            operations = self.client.bundle_operations(bundle_id)
        except PromoterError as exc:
            return refusal(exc)
        latest = operations[-1]["status"] if operations else "not_requested"
        return {"bundle_id": bundle_id, "status": latest, "operations": operations}

    def bundle_diff(
        self,
        bundle_id: str,
        max_bytes: int | None = None,
        path: str | None = None,
        cursor: str | None = None,
    ) -> Mapping[str, Any]:
        try:
            return self.client.bundle_diff(bundle_id, max_bytes, path=path, cursor=cursor)
        except PromoterError as exc:
            return refusal(exc)

    def preflight(self, bundle_id: str) -> Mapping[str, Any]:
        if not self.orchestrator_token:
            return {
                "status": "refused",
                "code": "forbidden",
                "detail": "the preflight reads the real worktree and needs the orchestrator's "
                "token, given explicitly (PROMOTER_ORCHESTRATOR_TOKEN)",
            }
        try:
            with self.client.with_token(self.orchestrator_token) as orchestrator:
                return orchestrator.preflight(bundle_id)
        except PromoterError as exc:
            return refusal(exc)
