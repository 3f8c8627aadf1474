"""The only exception hierarchy of promoter.

Every error promoter raises on purpose is a ``PromoterError`` subclass that carries a
stable machine-readable ``code`` (protocol: api#http-errors), the HTTP status the API answers with,
and the exit code the CLI exits with. Foreign exceptions (``OSError``, SQLAlchemy, subprocess) are
translated into these at the boundary that meets them, with ``raise ... from exc``.

This module deliberately holds no I/O and no formatting of responses: the API's problem
handler and the CLI's top-level handler do that.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

# Problem ``type`` URIs are served by the daemon itself: ``GET /problems/{code}``.
PROBLEM_TYPE_BASE = "/problems/"


class PromoterError(Exception):
    """Root of every error promoter raises on purpose."""

    code: ClassVar[str] = "internal"
    http_status: ClassVar[int] = 500
    exit_code: ClassVar[int] = 70
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str = "", **context: Any) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.context: dict[str, Any] = context

    def to_problem(self) -> dict[str, Any]:
        """The RFC 9457 members this error contributes (without ``instance``)."""
        problem: dict[str, Any] = {
            "type": f"{PROBLEM_TYPE_BASE}{self.code}",
            "title": self.title,
            "status": self.http_status,
            "detail": self.detail,
            "code": self.code,
        }
        for key, value in self.context.items():
            problem[key if key not in problem and key != "instance" else f"context_{key}"] = value
        return problem


# --- bad input (400/413/422) -------------------------------------------------------------


class BadRequest(PromoterError):
    code = "bad_request"
    http_status = 400
    exit_code = 64
    title = "The request is malformed"


class HostNotAllowed(PromoterError):
    code = "host_not_allowed"
    http_status = 421
    exit_code = 64
    title = "The request's Host is not a name of this daemon"


class ValidationFailed(PromoterError):
    code = "validation_failed"
    http_status = 422
    exit_code = 65
    title = "The document does not match its schema"


class SelectionInvalid(PromoterError):
    code = "selection_invalid"
    http_status = 422
    exit_code = 65
    title = "The paths or hunks chosen at review do not select a part of the bundle"


class DiffNotSeen(PromoterError):
    code = "diff_not_seen"
    http_status = 422
    exit_code = 65
    title = "The approval does not name the files its review did not show in full"


class SelectionSplitsPair(PromoterError):
    code = "selection_splits_pair"
    http_status = 422
    exit_code = 65
    title = "The selection accepts one half of a rename and declines the other"


class DerivedBundleRefused(PromoterError):
    code = "derived_bundle_refused"
    http_status = 422
    exit_code = 65
    title = "A submitted bundle claims to be derived at review; only the host derives them"


class PathInvalid(PromoterError):
    code = "path_invalid"
    http_status = 422
    exit_code = 65
    title = "A path breaks the path rules"


class SymlinkPolicy(PromoterError):
    """A link, resolved in the tree the promotion would leave, breaks ``symlinks: inside``."""

    code = "symlink_policy"
    http_status = 422
    exit_code = 65
    title = "A symlink resolves outside the worktree or into .git"


class PayloadTooLarge(PromoterError):
    code = "payload_too_large"
    http_status = 413
    exit_code = 65
    title = "The payload is larger than allowed"


class JsonTooDeep(PromoterError):
    code = "json_too_deep"
    http_status = 422
    exit_code = 65
    title = "The JSON body nests deeper than allowed"


class JsonTooManyItems(PromoterError):
    code = "json_too_many_items"
    http_status = 413
    exit_code = 65
    title = "The JSON body holds more values than allowed"


class BundleHashMismatch(PromoterError):
    code = "bundle_hash_mismatch"
    http_status = 422
    exit_code = 65
    title = "The bundle's hash or id does not match its content"


class BlobHashMismatch(PromoterError):
    code = "blob_hash_mismatch"
    http_status = 422
    exit_code = 65
    title = "The uploaded bytes do not hash to the named sha256"


class GrantInvalid(PromoterError):
    code = "grant_invalid"
    http_status = 422
    exit_code = 65
    title = "The grant cannot be registered"


class RepositoryInvalid(PromoterError):
    code = "repository_invalid"
    http_status = 422
    exit_code = 78
    title = "The repository cannot be guarded"


class VerificationFailed(PromoterError):
    code = "verification_failed"
    http_status = 422
    exit_code = 65
    title = "The bundle did not pass verification"


class ReceiptInvalid(PromoterError):
    code = "receipt_invalid"
    http_status = 422
    exit_code = 65
    title = "The receipt does not verify"


# --- authentication and authorization (401/403) -----------------------------------------


class Unauthenticated(PromoterError):
    code = "unauthenticated"
    http_status = 401
    exit_code = 77
    title = "No valid credentials were presented"


class Forbidden(PromoterError):
    code = "forbidden"
    http_status = 403
    exit_code = 77
    title = "The credentials do not allow this"


# --- missing things (404) -----------------------------------------------------------------


class NotFound(PromoterError):
    code = "not_found"
    http_status = 404
    exit_code = 66
    title = "No such resource"


class GrantUnknown(PromoterError):
    code = "grant_unknown"
    http_status = 404
    exit_code = 66
    title = "No grant with that id is registered"


class BundleUnknown(PromoterError):
    code = "bundle_unknown"
    http_status = 404
    exit_code = 66
    title = "No bundle with that id is stored"


class BlobMissing(PromoterError):
    code = "blob_missing"
    http_status = 422
    exit_code = 66
    title = "A referenced blob is not in the blob store"


class RepositoryUnknown(PromoterError):
    code = "repository_unknown"
    http_status = 404
    exit_code = 66
    title = "No repository with that name or identity is configured"


class CommitUnknown(PromoterError):
    code = "commit_unknown"
    http_status = 404
    exit_code = 66
    title = "No commit of that name is in the repository"


class OperationUnknown(PromoterError):
    code = "operation_unknown"
    http_status = 404
    exit_code = 66
    title = "No operation with that id exists"


class OwnedByOtherHost(PromoterError):
    """The ledger holds it, but another host owns it and only that host can serve this.

    Carries ``owner_host``: the host id to send the request to instead.
    """

    code = "owned_by_other_host"
    http_status = 421
    exit_code = 69
    title = "Another host of the ledger owns this bundle or operation"


class HostUnknown(PromoterError):
    code = "host_unknown"
    http_status = 404
    exit_code = 66
    title = "No host with that id is registered in the ledger"


class ReceiptUnavailable(PromoterError):
    code = "receipt_unavailable"
    http_status = 404
    exit_code = 66
    title = "The operation has no receipt (yet)"


# --- conflicts and refusals (409) ---------------------------------------------------------


class Conflict(PromoterError):
    code = "conflict"
    http_status = 409
    exit_code = 75
    title = "The request conflicts with stored state"


class DocumentConflict(Conflict):
    code = "document_conflict"
    title = "Different bytes are already stored under this name"


class GrantConflict(Conflict):
    code = "grant_conflict"
    title = "A different grant with this id is already registered"


class BundleConflict(Conflict):
    code = "bundle_conflict"
    title = "A different bundle with this id is already stored"


class ReceiptConflict(Conflict):
    code = "receipt_conflict"
    title = "Re-verification differs from the stored passed receipt"


class GrantExpired(Conflict):
    code = "grant_expired"
    title = "The grant is outside its validity window"


class LeaseStale(Conflict):
    code = "lease_stale"
    title = "The lease does not authorize this"


class LeaseFenceRegression(Conflict):
    code = "lease_fence_regression"
    title = "Lease fences only move forward"


class LeaseConflict(Conflict):
    code = "lease_conflict"
    title = "A lease with this fence and different fields is already set"


class TargetDrift(Conflict):
    code = "target_drift"
    title = "The repository is not in an authorized old state"


class BaseMoved(Conflict):
    """A run's change was made against a base that no longer is HEAD: the person's HEAD
    moved (a commit, a checkout) while the run's step ran. The command line's own word
    for the preflight's or the promotion's ``target_drift`` when HEAD is what drifted."""

    code = "base_moved"
    title = "HEAD moved since the run began; the change's base no longer is HEAD"


class SourceChanged(Conflict):
    """A file of a sandbox changed while the bundle builder read it (a process of the
    command still writing): no answer about the change; building again reads it anew."""

    code = "source_changed"
    title = "A file changed while it was read; nothing was submitted"


class LockUnavailable(Conflict):
    code = "lock_unavailable"
    title = "The repository lock could not be taken in time"


class OperationConflict(Conflict):
    code = "operation_conflict"
    title = "The operation is not in a state that allows this"


class ApprovalRejected(Conflict):
    code = "approval_rejected"
    title = "A person rejected this promotion; it is not held again unless reopened"


class ApprovedInPart(Conflict):
    code = "approved_in_part"
    title = "A person accepted part of this bundle; the part is promoted as its own operation"


class MergeConflict(Conflict):
    """A three-way merge of a drifted file left conflicts: they are shown, nothing written."""

    code = "merge_conflict"
    title = "The merge of a drifted file has conflicts; nothing was written"


class MergeUnsupported(Conflict):
    """A drifted path cannot be merged as text (binary, a symlink, missing, too large):
    shown side by side, nothing written."""

    code = "merge_unsupported"
    title = "A drifted path cannot be merged as text; nothing was written"


class NotRecoverable(Conflict):
    code = "not_recoverable"
    title = "Only an operation that needs recovery can be recovered"


class HostFenced(Conflict):
    """This daemon's host was fenced off by an operator: its epoch in the ledger is no
    longer the one the daemon registered with, so it writes nothing; its operations
    were handed to ``to_host``."""

    code = "host_fenced"
    title = "This host was fenced off; it writes nothing"


class HostLive(Conflict):
    """A fence of a host whose owner lease (or host lease) has not run out yet."""

    code = "host_live"
    title = "The host's owner lease has not expired; it cannot be fenced yet"


class HandoverRefused(Conflict):
    """The daemon host named to take over cannot: it is the fenced host itself, is
    fenced too, or is not configured for the repositories of the operations."""

    code = "handover_refused"
    title = "The named host cannot take over the fenced host's operations"


class PathUnsafe(Conflict):
    code = "path_unsafe"
    title = "A path on disk is unsafe to write (symlink, swap, special file, mount)"


class SnapshotStale(Conflict):
    code = "snapshot_stale"
    title = "The worktree is not at the expected tree"


class NotConfirmed(Conflict):
    """A person's command that writes their worktree was not confirmed (declined, or no
    terminal to ask at and no ``--yes``); nothing was written."""

    code = "not_confirmed"
    title = "The promotion was not confirmed; nothing was written"


# --- too much at once (429) ---------------------------------------------------------------


class TooManyRequests(PromoterError):
    """A costly read past its role's or credential's bound (protocol: api#work-bounded-per-caller);
    ``Retry-After``."""

    code = "too_many_requests"
    http_status = 429
    exit_code = 75
    title = "Too many costly requests at once; try again after Retry-After seconds"


# --- host-side failures (5xx) -------------------------------------------------------------


class StorageError(PromoterError):
    code = "storage_error"
    http_status = 507
    exit_code = 74
    title = "The host could not read or write its storage"


class QuotaExceeded(PromoterError):
    code = "quota_exceeded"
    http_status = 507
    exit_code = 73
    title = "The executor run's storage quota is used up"


class DatabaseBusy(PromoterError):
    code = "database_busy"
    http_status = 503
    exit_code = 75
    title = "The database stayed locked by another writer; try again"


class DatabaseUnavailable(PromoterError):
    code = "database_unavailable"
    http_status = 503
    exit_code = 75
    title = "The database cannot be reached; try again"


class SchemaMismatch(PromoterError):
    code = "schema_mismatch"
    http_status = 503
    exit_code = 78
    title = "The database schema is not the one this code was built for"


class LedgerMissing(PromoterError):
    """A command that needs the ledger found none where the settings point (a SQLite file
    that does not exist): it refuses and creates nothing."""

    code = "ledger_missing"
    http_status = 503
    exit_code = 78
    title = "No ledger exists where the settings point"


class Stopped(PromoterError):
    code = "stopped"
    http_status = 503
    exit_code = 75
    title = "The daemon is stopping"


class GitError(PromoterError):
    code = "git_error"
    http_status = 503
    exit_code = 74
    title = "A git command failed"


class WriteFailed(PromoterError):
    code = "write_failed"
    http_status = 503
    exit_code = 74
    title = "A worktree write failed"


class ConfinementUnavailable(PromoterError):
    code = "confinement_unavailable"
    http_status = 503
    exit_code = 69
    title = "The sandbox cannot be confined here"


class AddressInUse(PromoterError):
    """``promoter serve``: the port is taken; refused before anything else started."""

    code = "address_in_use"
    http_status = 503
    exit_code = 69
    title = "The address the daemon should listen on is in use"


class CommandFailed(PromoterError):
    """``promoter run``: the person's command (the agent) exited non-zero, was killed by a
    signal or ran past its timeout; never an HTTP answer. Its own exit status is in
    ``status`` (negative: the signal's number), or the timeout in ``timeout``."""

    code = "command_failed"
    http_status = 500
    exit_code = 71
    title = "The command run in the sandbox failed"


class Interrupted(PromoterError):
    """``promoter run`` stopped by Ctrl-C (SIGINT); never an HTTP answer."""

    code = "interrupted"
    http_status = 500
    exit_code = 130
    title = "Interrupted"


class CredentialsVisible(PromoterError):
    code = "credentials_visible"
    http_status = 500
    exit_code = 78
    title = "A credential would be visible in the sandbox"


class ConfigError(PromoterError):
    code = "config_error"
    http_status = 500
    exit_code = 78
    title = "The configuration is invalid"


class ServerUnavailable(ConfigError):
    """A client could not have the daemon's answer: it could not connect (refused, no
    route, a name that does not resolve), had no answer in time, or the connection closed
    before the answer. A ``ConfigError`` for the Python client's callers that catch one;
    its own code and exit 69 (EX_UNAVAILABLE) for the command line. A URL that is not one
    stays ``config_error``."""

    code = "server_unavailable"
    exit_code = 69
    title = "The promoter server cannot be had"


class WebhookTargetRefused(PromoterError):
    code = "webhook_target_refused"
    http_status = 422
    exit_code = 78
    title = "The webhook target is an address the policy refuses"


def all_error_classes() -> list[type[PromoterError]]:
    """Every concrete error class promoter defines, for the registry contract test and the
    docs (a subclass a test module declares is not one)."""
    found: list[type[PromoterError]] = []
    stack: list[type[PromoterError]] = [PromoterError]
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith("promoter."):
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.code)


def error_class(code: str) -> type[PromoterError]:
    """The error class that carries ``code`` (``PromoterError`` itself if none does)."""
    for cls in all_error_classes():
        if cls.code == code:
            return cls
    return PromoterError


FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk or quota


def stopped_by(exc: Exception, what: str) -> PromoterError:
    """The error a run that ``exc`` stopped answers and records: a ``PromoterError`` as it
    is; an ``OSError`` as ``storage_error`` when the disk is full (as the API answers any
    untranslated one, protocol: storage#storage-quota), else as ``write_failed`` with its errno;
    anything else ``internal``."""
    if isinstance(exc, PromoterError):
        return exc
    if isinstance(exc, OSError):
        why = f"{what} stopped: {exc.strerror or exc}"
        if exc.errno in FULL_ERRNOS:
            return StorageError(why, errno=exc.errno)
        return WriteFailed(why, errno=exc.errno)
    return PromoterError(f"{what} stopped: {str(exc)[:500]}")


def as_promoter_error(
    exc: BaseException, default: type[PromoterError] | None = None
) -> PromoterError:
    """``exc`` as promoter's own error: a ``PromoterError`` as it is, anything else wrapped
    in ``default`` (``WriteFailed`` unless given) with its text."""
    if isinstance(exc, PromoterError):
        return exc
    return (default or WriteFailed)(str(exc))


@contextmanager
def translated(
    default: type[PromoterError] | None = None,
    catch: tuple[type[BaseException], ...] = (OSError,),
) -> Iterator[None]:
    """Let a ``PromoterError`` through; raise any ``catch`` exception as ``default``
    (``WriteFailed`` unless given), chained from it. The one place the conversion of
    an ``OSError`` met while writing is written out."""
    try:
        yield
    except PromoterError:
        raise
    except catch as exc:
        raise as_promoter_error(exc, default) from exc


class Refusal:
    """What ``refusing`` caught: the error, or None when the block ran through."""

    error: PromoterError | None = None


@contextmanager
def refusing(
    record: Callable[[PromoterError], object],
    *,
    passing: tuple[type[PromoterError], ...] = (),
) -> Iterator[Refusal]:
    """The one translation of a refusal: a ``PromoterError`` the block raises is handed to
    ``record`` (which journals it, or raises another) and kept on the answer, so the
    caller stops; one of ``passing`` is raised on untouched, as is any other exception."""
    answer = Refusal()
    try:
        yield answer
    except passing:
        raise
    except PromoterError as exc:
        answer.error = exc
        record(exc)


__all__ = [name for name in dir() if not name.startswith("_")]
