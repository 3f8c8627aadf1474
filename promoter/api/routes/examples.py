"""The example documents the OpenAPI description shows for operations and reviews.

Plain values: an operation id, a bundle id and one operation's view as
``GET /v1/operations/{id}`` answers it (``tests/contract/test_openapi.py`` checks every
example against its schema). Deliberately not here: routes, models, validation.
"""

from __future__ import annotations

OP_ID = "op_df01bd2f8d2ade055f2b18ab3e4824e0"
BUNDLE_ID = "bnd_153e71e2b5433df959fb7897a3a9edb7"
STATE = {"exists": True, "sha256": "9f86d081" + "0" * 56, "mode": "100644", "bytes": 44}
VIEW_EXAMPLE = {
    "operation_id": OP_ID,
    "kind": "promotion",
    "status": "completed",
    "attempt": 1,
    "repository": "demo",
    "repository_identity": "repo_" + "1f" * 16,
    "grant_id": "grt_demo1",
    "bundle_id": BUNDLE_ID,
    "verification_receipt_sha256": "5539f0ee" + "0" * 56,
    "fence": 1,
    "code": None,
    "detail": None,
    "receipt_sha256": "c0ffee00" + "0" * 56,
    "owner": {
        "host": "host-5f3c9a0d17b2e648",
        "pid": 4242,
        "boot": "0b6f2c1e-4a7d-4c2b-9a51-3e8f0d6c7b21",
        "lease_until": "2026-11-30T21:06:12Z",
        "lease_expired": True,
    },
    "event_ids": {
        "decision": "evt_" + "1" * 32,
        "action": "evt_" + "2" * 32,
        "outcome": "evt_" + "3" * 32,
    },
    "pre_snapshot": "6a9fde31bac7" + "0" * 28,
    "post_snapshot": "7b0aef42cbd8" + "0" * 28,
    "report": None,
    "created_at": "2026-11-30T21:05:10Z",
    "updated_at": "2026-11-30T21:05:12Z",
    "steps": [
        {
            "seq": 0,
            "path": "src/app.py",
            "operation": "modify",
            "status": "completed",
            "old": STATE,
            "new": {**STATE, "sha256": "60303ae2" + "0" * 56, "bytes": 51},
            "detail": None,
        }
    ],
    "created_directories": [],
    "attempts": [
        {
            "attempt": 1,
            "status": "completed",
            "code": None,
            "started_at": "2026-11-30T21:05:10Z",
            "ended_at": "2026-11-30T21:05:12Z",
        }
    ],
    "events": [],
    "events_verified": True,
    "merged_into": [],
}
