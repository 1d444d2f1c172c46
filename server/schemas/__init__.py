"""Request and response bodies of the HTTP API (pydantic models).

Every field a client sends has a bound: text has a length and holds no NUL character and
no lone surrogate (no text column could store them), numbers stay within their column's
range, lists have a length, and a run's config has a size and a depth. What fails is a
422 naming the field.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

NAME_PATTERN = r"^[^\x00-\x1f]+$"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
SEGMENT_MAX = 2**15 - 1
"""Segments are numbered in a small integer column: a run may restart this often."""
MAX_CONFIG_BYTES = 64 * 1024
MAX_CONFIG_DEPTH = 32
MAX_TAG = 128
MAX_TAGS = 64
MAX_NOTES = 2000
"""The longest note on a run, in characters."""
MAX_REPEAT_SECONDS = 7 * 86_400
"""The longest ``repeat_every_seconds``: a week (the shortest is a setting, 60 s by default)."""


def plain_text(value: str) -> str:
    """``value`` if every text column can store it: no NUL character, no lone surrogate."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
    return value


def json_document(value: Any, *, max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    """``value`` if it is a JSON document a JSONB column stores as sent: at most
    ``MAX_CONFIG_DEPTH`` levels of nesting, at most ``max_bytes`` as JSON, every string
    plain text (`plain_text`), every number finite."""
    _check_document(value, 0)
    size = len(orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATACLASS))
    if size > max_bytes:
        raise ValueError(f"is {size} bytes as JSON; at most {max_bytes} are kept")
    return value


def _check_document(value: Any, depth: int) -> None:
    if depth > MAX_CONFIG_DEPTH:
        raise ValueError(f"is nested deeper than {MAX_CONFIG_DEPTH} levels")
    if isinstance(value, str):
        plain_text(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("holds a non-finite number, which JSON cannot store")
    elif isinstance(value, int) and not isinstance(value, bool):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:  # orjson and JSONB both refuse more
            raise ValueError("holds an integer outside the 64-bit range")
    elif isinstance(value, dict):
        for key, item in value.items():
            plain_text(str(key))
            _check_document(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_document(item, depth + 1)


Text = Annotated[str, AfterValidator(plain_text)]
"""A string any text column can store."""
Tag = Annotated[
    str, AfterValidator(plain_text), Field(min_length=1, max_length=MAX_TAG, pattern=NAME_PATTERN)
]
Step = Annotated[int, Field(ge=0, le=INT64_MAX)]
SegmentNumber = Annotated[int, Field(ge=1, le=SEGMENT_MAX)]
Config = Annotated[dict[str, Any], AfterValidator(json_document)]
MetricName = Annotated[str, AfterValidator(plain_text), Field(min_length=1, max_length=512)]
RuleId = Annotated[int, Field(ge=1, le=INT32_MAX)]


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: Text | None = Field(
        default=None, max_length=128, description="Defaults to the token's project."
    )
    name: Text = Field(min_length=1, max_length=256, pattern=NAME_PATTERN)
    config: Config = Field(
        default_factory=dict,
        description=f"Hyperparameters: any JSON object up to {MAX_CONFIG_BYTES} bytes and "
        f"{MAX_CONFIG_DEPTH} levels deep; merged into what the run already has.",
    )
    tags: list[Tag] = Field(
        default_factory=list,
        max_length=64,
        description=f"Up to 64 tags of 1 to {MAX_TAG} characters.",
    )
    start_step: Step | None = Field(
        default=None,
        description="First step this trainer process will log; below the run's last step it "
        "opens a new segment (a restart from a checkpoint).",
    )


class RunUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["running", "finished", "failed"] | None = None
    tags: list[Tag] | None = Field(default=None, max_length=64)
    notes: Text | None = Field(
        default=None,
        max_length=MAX_NOTES,
        description=f"The run's note, at most {MAX_NOTES} characters; an empty one (or only "
        "spaces) removes it.",
    )


class SegmentOut(BaseModel):
    segment: int
    start_step: int | None
    created_at: datetime


class RunOut(BaseModel):
    id: str
    project: str
    name: str
    status: str
    segment: int
    config: dict[str, Any]
    tags: list[str]
    last_step: int | None
    last_seen: datetime
    created_at: datetime
    notes: str | None = None
    """The run's note (None: it has none)."""
    segments: list[SegmentOut] | None = None


class MetricOut(BaseModel):
    name: str
    last_step: int | None
    last_value: float | str | None
    canonical: str | None = None
    """The canonical name this stored alias stands for (left out for other names)."""

    @model_serializer(mode="wrap")
    def _without_canonical(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if isinstance(out, dict) and out.get("canonical") is None:
            out.pop("canonical", None)
        return out


MetricValue = float | Literal["NaN", "Infinity", "-Infinity"] | None


class MetricBatchIn(BaseModel):
    """A columnar batch as the ingest route reads it (the route parses the body itself, in
    bulk; this model describes it for the OpenAPI document)."""

    model_config = ConfigDict(extra="forbid")

    steps: list[Step] = Field(
        description="The batch's steps, each column's length. A step given more than once is "
        "one step: each metric keeps the first value given for it there, and the later ones "
        "are counted as ignored."
    )
    metrics: dict[str, list[MetricValue]] = Field(
        description="Metric name (1 to 512 characters) to its values, one a step: a number, "
        'null (not logged at that step), "NaN", "Infinity" or "-Infinity".'
    )
    segment: SegmentNumber | None = Field(
        default=None, description="The run's segment the steps belong to; its current one."
    )


class Accepted(BaseModel):
    accepted: int = Field(description="Points stored.")
    ignored: int = Field(
        description="Points not stored because the point (segment, metric, step) has a value "
        "already: stored before (a re-sent batch, a step logged again), or given earlier in "
        "this batch. The first value of a point stands."
    )
    ignored_metrics: dict[str, int] | None = Field(
        default=None,
        description="Present when `ignored` > 0: the ignored points by metric name, for at "
        "most 100 metrics (those with the most ignored points; `ignored` counts them all).",
    )
    segment: int
    control: list[dict[str, Any]] | None = Field(
        default=None,
        description="With `control_read`: the run's unread requests to its trainer, each "
        '`{"id", "action": "checkpoint"|"stop", "reason", "source": "admin"|"rule", "step"}`.',
    )


class EventCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: Step
    kind: Text = Field(default="note", min_length=1, max_length=32, pattern=NAME_PATTERN)
    text: Text = Field(min_length=1, max_length=4096)
    segment: SegmentNumber | None = None


class EventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    step: int
    segment: int
    kind: str
    text: str
    created_at: datetime


class SeriesOut(BaseModel):
    metric: str
    steps: list[int]
    values: list[float | str]
    downsampled: bool
    total_points: int


class SeriesResponse(BaseModel):
    series: list[SeriesOut]


class Health(BaseModel):
    status: str
    database: str


class ValidationItem(BaseModel):
    """One failed check of a request's body or query (FastAPI's shape, without the input)."""

    type: str
    loc: list[str | int]
    msg: str
    ctx: dict[str, Any] | None = None


class ErrorOut(BaseModel):
    """Every error answer: ``detail`` says what is wrong (for a failed validation, one item a
    failed check); a 500 adds the ``error_id`` its traceback is logged under; a 404 for
    metric names the run never logged adds ``unknown`` and ``suggestions`` (and, comparing
    runs, ``missing_in``)."""

    detail: str | list[ValidationItem]
    error_id: str | None = None
    unknown: list[str] | None = None
    """The metric names, globs or prefixes (as written) that the run never logged."""
    suggestions: dict[str, list[str]] | None = None
    """For each unknown name, the closest names the run has, closest first (maybe none)."""
    missing_in: dict[str, list[str]] | None = None
    """Comparing runs: for each unknown name, the compared runs (ids) that lack it."""
