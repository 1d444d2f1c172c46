"""Schemathesis over every operation of /openapi.json, against a real server on Postgres.

Cases are generated from the service's own OpenAPI description (positive and negative
data) and sent with valid tokens: the admin token for every operation, and the ingest
token too for the routes of that scope. Path parameters are either generated (mostly
unknown ids: 404 or 422) or the ids of a seeded run, rule and token, so that real
objects are read, changed, previewed, test-sent, revoked and rotated. Every answer must
be

- no server error (5xx),
- a documented status code, with the documented content type and body schema,
- for a 422, FastAPI's shape as the service sends it: ``{"detail": [{"type", "loc",
  "msg", "ctx"?}]}``, without the offending ``input``.

Failures are collected over every operation and reported together, with the operations,
requests and statuses seen.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from normwatch.server.auth import create_token
from normwatch.server.db import build_engine, session_factory
from normwatch.testing import ServerProcess, running_server
from tests.helpers.tenants import Tenant, make_tenant

EXAMPLES_PER_OPERATION = 60
"""Generated cases per operation and token, at most: some 1,400 requests in all (fewer
distinct cases exist for operations with few parameters), under a minute on two cores."""

INGEST_ROUTE = ("POST", "/api/v1/runs/{run_id}/metrics")
INGEST_SCOPE = {
    ("POST", "/api/v1/runs"),
    ("PATCH", "/api/v1/runs/{run_id}"),
    INGEST_ROUTE,
    ("POST", "/api/v1/runs/{run_id}/events"),
}
"""Operations an ingest token may call: run with that token as well as the admin's."""

VALUE = {
    "anyOf": [
        {"type": "number"},
        {"type": "null"},
        {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]},
    ]
}
BATCH_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["steps", "metrics"],
                "properties": {
                    "steps": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    "metrics": {
                        "type": "object",
                        "additionalProperties": {"type": "array", "items": VALUE},
                    },
                    "segment": {"type": "integer", "minimum": 1},
                },
                "additionalProperties": False,
            }
        }
    },
}
"""The contract's columnar batch, used when the service's description has no request body
for the ingest route (it reads the body itself), so that JSON batches are sent anyway."""

VALIDATION_ERROR_KEYS = {"type", "loc", "msg", "ctx"}

LAYER_NAMES = [f"grad/norm/layers.{i}.attn.w" for i in range(4)]
PARAM_NAMES = [name.replace("grad/", "params/") for name in LAYER_NAMES]
METRIC_NAMES = ["grad/norm/total", "params/norm/final_norm.weight", *LAYER_NAMES, *PARAM_NAMES]
"""The seeded run's metrics, which the run-scoped fuzzing draws its names from."""


@dataclass
class Seeded:
    """Real objects of the tenant's project that path parameters can name."""

    run_id: str
    rule_id: int
    token_id: int
    credentials: frozenset[int]
    """Ids of the tokens the test authenticates with: never revoked or rotated."""


@dataclass
class Tally:
    """What was sent and what came back."""

    statuses: Counter[int] = field(default_factory=Counter)
    by_operation: dict[str, Counter[int]] = field(default_factory=dict)
    failures: dict[tuple[str, int, str], str] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def operations(self) -> set[str]:
        """The operations requests were sent to (whatever the token)."""
        return {label.removesuffix(" [ingest]") for label in self.by_operation}

    def record(self, label: str, status: int) -> None:
        self.statuses[status] += 1
        self.by_operation.setdefault(label, Counter())[status] += 1

    def fail(self, label: str, status: int, title: str, detail: str) -> None:
        # One entry per operation, status and kind of failure: the first example of each.
        self.failures.setdefault((label, status, title), detail)

    def summary(self) -> str:
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
        lines = [
            f"schemathesis: {len(self.operations)} operations, {self.requests} requests; "
            f"statuses {statuses}"
        ]
        for label in sorted(self.by_operation):
            seen = ", ".join(f"{c}: {n}" for c, n in sorted(self.by_operation[label].items()))
            lines.append(f"  {label}: {seen}")
        return "\n".join(lines)


@pytest.fixture
def schemathesis_server(fresh_pg_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    with running_server(fresh_pg_url, tmp_path) as server:
        yield server


def seed(server: ServerProcess, tenant: Tenant) -> Seeded:
    """A run with metrics (an alert fired and resolved on them), an event, a rule, and a
    spare token."""
    with httpx.Client(base_url=server.url, timeout=30) as api:
        ingest, admin = tenant.headers("ingest"), tenant.headers("admin")
        run = api.post("/api/v1/runs", json={"name": "seeded", "start_step": 0}, headers=ingest)
        assert run.status_code == 200, run.text
        run_id = run.json()["id"]
        rule = {
            "name": "grad norm 5+",
            "metric": "grad/norm/total",
            "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
        }
        made = api.post("/api/v1/alert-rules", json=rule, headers=admin)
        assert made.status_code == 201, made.text
        total = [0.3, 0.4, 6.0, 0.5, "NaN", 0.3, None, 0.2, 0.3, 0.4]
        # Four layers of equal grad norm, the total the root of their summed squares.
        layer = [v if isinstance(v, str) or v is None else v / 2 for v in total]
        batch = {
            "steps": list(range(10)),
            "metrics": {
                "grad/norm/total": total,
                "params/norm/final_norm.weight": [341.2 + i for i in range(10)],
                **{name: layer for name in LAYER_NAMES},
                **{name: [40.0 + i for i in range(10)] for name in PARAM_NAMES},
            },
        }
        stored = api.post(f"/api/v1/runs/{run_id}/metrics", json=batch, headers=ingest)
        assert stored.status_code == 202, stored.text
        event = {"step": 4, "kind": "config", "text": "lr warmup over"}
        assert (
            api.post(f"/api/v1/runs/{run_id}/events", json=event, headers=ingest).status_code == 201
        )
        alerts = api.get("/api/v1/alerts", headers=admin).json()
        assert [a["state"] for a in alerts] == ["resolved", "firing"]  # newest first
        credentials = frozenset(t["id"] for t in api.get("/api/v1/tokens", headers=admin).json())
    assert len(credentials) == 3
    spare = spare_token(server.database_url, tenant.project)
    return Seeded(run_id, made.json()["id"], spare, credentials)


def spare_token(database_url: str, project: str) -> int:
    """A read token of ``project`` (never one the test authenticates with), by id."""
    engine = build_engine(database_url, pool_size=1)
    try:
        with session_factory(engine)() as session, session.begin():
            return create_token(session, project, "read", f"spare-{uuid.uuid4().hex[:6]}")[1].id
    finally:
        engine.dispose()


def load_schema(server: ServerProcess) -> tuple[dict[str, Any], list[str]]:
    """The service's description, and what it lacks that the test had to add."""
    raw = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    gaps = []
    method, path = INGEST_ROUTE
    ingest = raw["paths"][path][method.lower()]
    if "requestBody" not in ingest:
        gaps.append(
            f"{method} {path} declares no request body: schemathesis would send none; "
            "the contract's batch schema was added for this run"
        )
        ingest["requestBody"] = copy.deepcopy(BATCH_BODY)
    return raw, gaps


def described_operations(raw: dict[str, Any]) -> set[str]:
    methods = {"get", "put", "post", "patch", "delete", "head", "options"}
    return {
        f"{method.upper()} {path}"
        for path, item in raw["paths"].items()
        for method in item
        if method in methods
    }


def validation_error_shape(raw: dict[str, Any]) -> list[str]:
    """How the documented error body differs from what the service sends, if it does: every
    error answer is an ``ErrorOut``, whose ``detail`` is a message or a list of
    ``ValidationItem``s."""
    schemas = raw["components"]["schemas"]
    problems = []
    if "ValidationError" in schemas or "HTTPValidationError" in schemas:
        problems.append("FastAPI's own 422 models are documented; the service sends ErrorOut")
    item = schemas["ValidationItem"]
    if set(item["properties"]) != VALIDATION_ERROR_KEYS:
        problems.append(
            f"ValidationItem documents properties {sorted(item['properties'])}; "
            f"the service sends {sorted(VALIDATION_ERROR_KEYS)} (no 'input')"
        )
    if set(item.get("required", ())) != {"type", "loc", "msg"}:
        problems.append(f"ValidationItem requires {sorted(item.get('required', ()))}")
    return problems


def check_422_shape(response: httpx.Response | Any) -> str | None:
    """Why a 422 body is neither ``{"detail": [{"type", "loc", "msg", "ctx"?}]}`` (a body or
    query failed validation) nor ``{"detail": "<message>"}`` (a refusal naming the field),
    or None."""
    try:
        body = response.json()
    except ValueError:
        return "422 body is not JSON"
    detail = body.get("detail") if isinstance(body, dict) else None
    if set(body) == {"detail"} and isinstance(detail, str) and detail:
        return None
    if set(body) != {"detail"} or not isinstance(detail, list) or not detail:
        return f"422 body is not a list of validation errors: {str(body)[:200]}"
    for item in detail:
        keys = set(item) if isinstance(item, dict) else set()
        if not {"type", "loc", "msg"} <= keys <= VALIDATION_ERROR_KEYS:
            return f"422 item has keys {sorted(keys)}"
        if not isinstance(item["loc"], list) or not all(
            isinstance(p, str | int) for p in item["loc"]
        ):
            return f"422 item loc is not a list of names and indexes: {item['loc']!r}"
        if not isinstance(item["msg"], str) or not isinstance(item["type"], str):
            return "422 item msg or type is not text"
        if "ctx" in item and not isinstance(item["ctx"], dict):
            return f"422 item ctx is not an object: {item['ctx']!r}"
    return None


class Replacements:
    """Destructive calls on the seeded token and rule get a fresh object each time it was
    used up, so later cases revoke, rotate and delete something real too."""

    def __init__(self, server: ServerProcess, tenant: Tenant, seeded: Seeded) -> None:
        self.server = server
        self.tenant = tenant
        self.seeded = seeded
        self.token_id = seeded.token_id
        self.rule_id = seeded.rule_id
        self.rules_made = 0

    def apply(self, case: Case[Any]) -> None:
        params = case.path_parameters
        # A generated id may name a token the test authenticates with: the spare goes instead.
        if params.get("token_id") in {self.seeded.token_id, *self.seeded.credentials}:
            params["token_id"] = self.token_id
        if case.method == "DELETE" and params.get("rule_id") == self.seeded.rule_id:
            params["rule_id"] = self.rule_id

    def used(self, case: Case[Any], status: int) -> None:
        if "{token_id}" in case.path and status in (201, 204):
            self.token_id = spare_token(self.server.database_url, self.tenant.project)
        if case.method == "DELETE" and "{rule_id}" in case.path and status == 204:
            self.rules_made += 1
            rule = {
                "name": f"to delete {self.rules_made}",
                "metric": "grad/norm/total",
                "condition": {"kind": "non_finite"},
            }
            made = httpx.post(
                f"{self.server.url}/api/v1/alert-rules",
                json=rule,
                headers=self.tenant.headers("admin"),
                timeout=30,
            )
            assert made.status_code == 201, made.text
            self.rule_id = made.json()["id"]


def strategies(
    operation: Any, tenant: Tenant, seeded: Seeded
) -> list[tuple[str, st.SearchStrategy[Case[Any]]]]:
    """(token scope, cases) for an operation: generated ids, and the seeded ones."""
    key = (operation.method.upper(), operation.path)
    scopes = ["admin", "ingest"] if key in INGEST_SCOPE else ["admin"]
    names = {p.name for p in operation.iter_parameters() if p.location == "path"}
    real = {
        name: value
        for name, value in {
            "run_id": seeded.run_id,
            "rule_id": seeded.rule_id,
            "token_id": seeded.token_id,
        }.items()
        if name in names
    }
    query_names = {p.name for p in operation.iter_parameters() if p.location == "query"}
    real_query = {"run": seeded.run_id} if "run" in query_names else None
    out = []
    for scope in scopes:
        headers = {"Authorization": f"Bearer {getattr(tenant, scope)}"}
        variants = [
            operation.as_strategy(GenerationMode.POSITIVE, headers=headers),
            operation.as_strategy(GenerationMode.NEGATIVE, headers=headers),
        ]
        if real:
            variants += [
                operation.as_strategy(
                    GenerationMode.POSITIVE, headers=headers, path_parameters=real, query=real_query
                ),
                operation.as_strategy(
                    GenerationMode.NEGATIVE, headers=headers, path_parameters=real
                ),
            ]
        elif real_query:
            variants.append(
                operation.as_strategy(GenerationMode.POSITIVE, headers=headers, query=real_query)
            )
        out.append((scope, st.one_of(variants)))
    return out


def exercise(
    label: str,
    cases: st.SearchStrategy[Case[Any]],
    server: ServerProcess,
    replacements: Replacements,
    tally: Tally,
) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        # They judge how fast and how well cases are generated, not the service.
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def send(case: Case[Any]) -> None:
        replacements.apply(case)
        response = case.call(base_url=server.url, timeout=30)
        status = response.status_code
        tally.record(label, status)
        replacements.used(case, status)
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as group:
            for failure in group.exceptions:
                first = failure.message.strip().splitlines()[0] if failure.message else ""
                tally.fail(label, status, failure.title, f"{first}; answer {response.text[:160]}")
        if status == 422:
            problem = check_422_shape(response)
            if problem is not None:
                tally.fail(label, status, "422 shape", problem)

    send()


CHECKS: list[Callable[..., Any]] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.mark.slow
def test_every_operation_conforms_to_its_description(
    schemathesis_server: ServerProcess,
) -> None:
    server = schemathesis_server
    tenant = make_tenant(server.database_url)
    seeded = seed(server, tenant)
    raw, gaps = load_schema(server)
    schema = schemathesis.openapi.from_dict(raw)
    schema.config.update(base_url=server.url)

    tally = Tally()
    replacements = Replacements(server, tenant, seeded)
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # an operation schemathesis cannot read
        operations.append(result.ok())
    # Deletions last: everything else sees the seeded objects before they go.
    operations.sort(key=lambda op: op.method.upper() == "DELETE")
    for operation in operations:
        label = f"{operation.method.upper()} {operation.path}"
        for scope, cases in strategies(operation, tenant, seeded):
            exercise(
                f"{label} [{scope}]" if scope != "admin" else label,
                cases,
                server,
                replacements,
                tally,
            )

    print(tally.summary())
    assert tally.operations == described_operations(raw)
    problems = [
        f"{label} -> {status}: {title}\n    {detail}"
        for (label, status, title), detail in sorted(tally.failures.items())
    ]
    problems += gaps + validation_error_shape(raw)
    assert not problems, f"{tally.summary()}\n\n" + "\n".join(problems)


# --- run-scoped parameters ------------------------------------------------------------------
# Generated ``metric`` and ``prefix`` values are random text, which names nothing: every read
# was answered at once with nothing found, and the expensive paths (globs matched against a
# run's names, expressions evaluated, windows and ranges analysed) were never reached. Here
# they are drawn from the seeded run's names, globs over them, hostile globs, expressions
# good and bad, and numbers at and past every bound.

PER_REQUEST_S = 5.0
"""Longest a fuzzed read may take: hostile input must cost what ordinary input does."""
RUN_SCOPED_EXAMPLES = 100

NAMES = st.sampled_from(METRIC_NAMES)
GLOBS = st.sampled_from(
    [
        "grad/norm/*",
        "grad/norm/layers.*",
        "**",
        "*/norm/**",
        "grad/norm/layers.?.attn.w",
        "grad/norm/layers.[0-2].*",
        "grad/norm/layers.[!0].*",
        "params/**/w",
        "[z-a]",
        "grad/norm/[z-a]*",
        "[",
        "grad/[!",
        "*" * 16 + "#",
        "*a" * 17,
        "**" * 40 + "x",
        "x" * 600,
        "*" * 600,
    ]
) | st.builds(lambda k, end: "*" * k + end, st.integers(1, 40), st.sampled_from(["#", "a", "/"]))
SIMPLE = NAMES | GLOBS
EXPRESSIONS = st.recursive(
    SIMPLE,
    lambda inner: st.one_of(
        st.builds("ratio({}, {})".format, inner, inner),
        st.builds("share({}, {})".format, inner, inner),
        st.builds("rss({})".format, SIMPLE),
    ),
    max_leaves=20,
) | st.sampled_from(
    [
        "ratio(" * 9 + "grad/norm/total" + ", grad/norm/total)" * 9,
        "rss((grad/norm/*",
        "ratio(grad/norm/total, params/norm/final_norm.weight))",
        "ratio(grad/norm/total,",
        "ratio(, )",
        "log(grad/norm/total)",
        "rss(ratio(a, b))",
        "share(" + ", ".join(["grad/norm/*"] * 40) + ")",
    ]
)
METRICS = (
    st.lists(EXPRESSIONS | st.text(max_size=40), min_size=1, max_size=4)
    | st.lists(NAMES, min_size=60, max_size=70)
    | st.just([])
)
PREFIXES = st.sampled_from(
    ["grad/norm", "params/norm", "grad", "", "grad/norm/layers.*", "[z-a]", "*" * 20, "x" * 600]
) | st.text(max_size=30)
BOUNDS = [0, 1, -1, 2, 9, 10, 2**31, 2**40, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64]
NUMBERS = st.sampled_from(BOUNDS) | st.integers(-(2**64), 2**64)
NUMERIC = ("start", "end", "points", "window", "max_lag", "at")
RUN_SCOPED = {
    "/api/v1/runs/{run_id}/series",
    "/api/v1/runs/{run_id}/layers",
    "/api/v1/runs/{run_id}/attribution",
    "/api/v1/runs/{run_id}/transitions",
    "/api/v1/runs/{run_id}/spikes",
    "/api/v1/compare",
}


def overrides(operation: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Query values for the operation's name and number parameters (a number may be left
    to schemathesis)."""
    names = {p.name for p in operation.iter_parameters() if p.location == "query"}
    required = {
        name: strategy
        for name, strategy in (("metric", METRICS), ("prefix", PREFIXES))
        if name in names
    }
    optional = {name: NUMBERS for name in NUMERIC if name in names}
    return st.fixed_dictionaries(required, optional=optional)


def exercise_reads(
    operation: Any,
    server: ServerProcess,
    seeded: Seeded,
    headers: dict[str, str],
    tally: Tally,
    slowest: list[tuple[float, str]],
) -> None:
    """Send `RUN_SCOPED_EXAMPLES` reads of the seeded run, with `overrides`, and tally them."""
    label = f"GET {operation.path}"
    path = {"run_id": seeded.run_id} if "{run_id}" in operation.path else {}
    takes_runs = "run" in {p.name for p in operation.iter_parameters() if p.location == "query"}
    cases = operation.as_strategy(GenerationMode.POSITIVE, headers=headers, path_parameters=path)

    @settings(
        max_examples=RUN_SCOPED_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, query=overrides(operation))
    def send(case: Case[Any], query: dict[str, Any]) -> None:
        case.query = {**(case.query or {}), **query}
        if takes_runs:
            case.query["run"] = [seeded.run_id]
        started = time.perf_counter()
        response = case.call(base_url=server.url, timeout=60)
        took = time.perf_counter() - started
        slowest.append((took, f"{label} {case.query}"[:300]))
        status = response.status_code
        tally.record(label, status)
        if status == 200 and label.endswith("/series"):
            found = [s for s in response.json()["series"] if s["steps"]]
            tally.record(f"{label} with points", 200 if found else 204)
        if took > PER_REQUEST_S:
            tally.fail(label, status, "slow", f"{took:.1f} s for {case.query}"[:300])
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as group:
            for failure in group.exceptions:
                first = failure.message.strip().splitlines()[0] if failure.message else ""
                tally.fail(label, status, failure.title, f"{first}; {str(case.query)[:200]}")
        if status == 422:
            problem = check_422_shape(response)
            if problem is not None:
                tally.fail(label, status, "422 shape", problem)

    send()


def test_run_scoped_reads_of_real_names_are_bounded_and_conform(
    schemathesis_server: ServerProcess,
) -> None:
    server = schemathesis_server
    tenant = make_tenant(server.database_url)
    seeded = seed(server, tenant)
    raw, _ = load_schema(server)
    schema = schemathesis.openapi.from_dict(raw)
    schema.config.update(base_url=server.url)
    tally = Tally()
    slowest: list[tuple[float, str]] = []
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if isinstance(result, Ok)
        and result.ok().method.upper() == "GET"
        and result.ok().path in RUN_SCOPED
    ]
    assert {op.path for op in operations} == RUN_SCOPED
    for operation in operations:
        exercise_reads(operation, server, seeded, tenant.headers("read"), tally, slowest)

    print(tally.summary())
    print("slowest:", *sorted(slowest, reverse=True)[:3], sep="\n  ")
    problems = [
        f"{label} -> {status}: {title}\n    {detail}"
        for (label, status, title), detail in sorted(tally.failures.items())
    ]
    assert not problems, f"{tally.summary()}\n\n" + "\n".join(problems)
    # The fuzzing reached the data: every operation answered with it, and refused some.
    for label, statuses in tally.by_operation.items():
        if label.endswith("with points"):
            assert statuses[200] > 10, (label, statuses)  # names and globs matched points
        else:
            assert statuses[200] > 0 and statuses[422] > 0, (label, statuses)
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
