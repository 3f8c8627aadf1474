"""The HTTP API's path parameters: their patterns, descriptions and examples.

Kept apart from ``promoter.api.models`` because they are FastAPI's ``Path`` markers:
importing FastAPI takes about half a second, which the client and the CLI commands that
talk to a daemon need not pay. Deliberately not here: request and response bodies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from promoter.api.models import BUNDLE_ID, OPERATION_ID, TREE_ID
from promoter.domain.models import NAME_PATTERN

# Ids in paths. The patterns are published, not enforced: an id of another shape names
# nothing that could exist, and answers the same 404 code as an unknown one, as before.
BundleIdParam = Annotated[
    str,
    Path(
        description="a bundle id: `bnd_` and 32 hex",
        json_schema_extra={"pattern": BUNDLE_ID},
        examples=["bnd_153e71e2b5433df959fb7897a3a9edb7"],
    ),
]
OperationIdParam = Annotated[
    str,
    Path(
        description="an operation id: `op_` and 32 hex",
        json_schema_extra={"pattern": OPERATION_ID},
        examples=["op_df01bd2f8d2ade055f2b18ab3e4824e0"],
    ),
]
GrantIdParam = Annotated[
    str,
    Path(
        description="a grant id: a name of `[A-Za-z0-9_.:-]`, at most 200 characters",
        json_schema_extra={"pattern": NAME_PATTERN, "maxLength": 200},
        examples=["grt_demo1"],
    ),
]
# Names and trees are enforced, as they were: a malformed one is `validation_failed`.
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=200, examples=["demo"])]
TreeParam = Annotated[str, Path(pattern=TREE_ID, examples=["6a9fde31bac7" + "0" * 28])]
HexParam = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", examples=["0" * 64])]
HostIdParam = Annotated[
    str,
    Path(
        description="a host id of the ledger (the daemon's `host_id`)",
        json_schema_extra={"maxLength": 200},
        examples=["host-a"],
    ),
]
