"""Alert rules (admin to change, read to see), previews, test sends, and alert history."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response

from ..schemas import INT32_MAX
from ..schemas.alerts import (
    AckCreate,
    AlertOut,
    AlertRuleCreate,
    AlertRuleOut,
    AlertRuleUpdate,
    RulePreview,
    SilenceCreate,
    SilenceOut,
    TestDelivery,
)
from ..services import alert_rules as rules
from ..services import silences
from ..services.access import own_project
from .context import ContextDep
from .deps import Admin, Reader, SessionDep, SnapshotDep
from .errors import API, documented

router = APIRouter(prefix="/api/v1", tags=["alerts"], responses=documented(*API))

RuleIdPath = Annotated[int, Path(ge=1, le=INT32_MAX, description="The rule's id.")]


@router.post(
    "/alert-rules", status_code=201, response_model=AlertRuleOut, responses=documented(409)
)
def create_rule(
    body: AlertRuleCreate, session: SessionDep, who: Admin, context: ContextDep
) -> AlertRuleOut:
    """Create a rule. Channel URLs that resolve to private or loopback addresses are refused
    unless ``NORMWATCH_WEBHOOK_ALLOW`` lists them; secrets are masked in every response."""
    out = rules.create_rule(
        session,
        who,
        body,
        context.webhook_allow,
        min_repeat_s=context.settings.alert_repeat_min_s,
    )
    session.commit()
    return out


@router.get("/alert-rules", response_model=list[AlertRuleOut])
def list_rules(session: SessionDep, who: Reader) -> list[AlertRuleOut]:
    return rules.list_rules(session, who)


@router.get("/alert-rules/{rule_id}", response_model=AlertRuleOut, responses=documented(404))
def get_rule(rule_id: RuleIdPath, session: SessionDep, who: Reader) -> AlertRuleOut:
    rule = rules.get_rule(session, who, rule_id)
    return rules.to_out(rule, who.project, admin=who.can("admin"))


@router.patch("/alert-rules/{rule_id}", response_model=AlertRuleOut, responses=documented(404, 409))
def update_rule(
    rule_id: RuleIdPath,
    body: AlertRuleUpdate,
    session: SessionDep,
    who: Admin,
    context: ContextDep,
) -> AlertRuleOut:
    """Change fields; a new condition, metric or run selector restarts its evaluation."""
    out = rules.update_rule(
        session,
        who,
        rule_id,
        body,
        context.webhook_allow,
        min_repeat_s=context.settings.alert_repeat_min_s,
    )
    session.commit()
    return out


@router.delete("/alert-rules/{rule_id}", status_code=204, responses=documented(404))
def delete_rule(rule_id: RuleIdPath, session: SessionDep, who: Admin) -> Response:
    rules.delete_rule(session, who, rule_id)
    session.commit()
    return Response(status_code=204)


@router.get("/alert-rules/{rule_id}/preview", response_model=RulePreview, responses=documented(404))
def preview_rule(
    rule_id: RuleIdPath, session: SnapshotDep, who: Reader, run: Annotated[str, Query()]
) -> RulePreview:
    """Where the rule would have fired and resolved on a stored run."""
    return rules.preview_rule(session, who, rule_id, run)


@router.post(
    "/alert-rules/{rule_id}/test", response_model=list[TestDelivery], responses=documented(404)
)
def test_rule(
    rule_id: RuleIdPath, session: SessionDep, who: Admin, context: ContextDep
) -> list[TestDelivery]:
    """Send a sample firing notification to each channel now, and report what happened."""
    rule = rules.get_rule(session, who, rule_id)
    return rules.send_test(
        rule, who.project, context.settings.base_url, context.dispatcher.deliverer
    )


@router.get("/alerts", response_model=list[AlertOut], responses=documented(404))
def list_alerts(
    session: SessionDep,
    who: Reader,
    project: str | None = None,
    run: str | None = None,
    state: Literal["firing", "resolved"] | None = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 200,
) -> list[AlertOut]:
    """Alert history, newest first: rule, run, metric, state, step, value and deliveries."""
    own_project(who, project)
    return rules.list_alerts(session, who, run_id=run, state=state, limit=limit)


SilenceIdPath = Annotated[int, Path(ge=1, le=INT32_MAX, description="The silence's id.")]


@router.post("/silences", status_code=201, response_model=SilenceOut, responses=documented(404))
def create_silence(body: SilenceCreate, session: SessionDep, who: Admin) -> SilenceOut:
    """Hold back the notifications of a rule, a run and a metric glob (each optional)
    until ``ends_at`` or past ``until_step``: they are recorded in the history, not sent."""
    out = silences.create_silence(session, who, body)
    session.commit()
    return out


@router.get("/silences", response_model=list[SilenceOut])
def list_silences(
    session: SessionDep, who: Reader, project: str | None = None, active: bool = False
) -> list[SilenceOut]:
    """The project's silences, newest first; ``active=true`` for those in force."""
    own_project(who, project)
    return silences.list_silences(session, who, active_only=active)


@router.delete("/silences/{silence_id}", status_code=204, responses=documented(404))
def expire_silence(silence_id: SilenceIdPath, session: SessionDep, who: Admin) -> Response:
    """End a silence now (it stays listed, expired)."""
    silences.expire_silence(session, who, silence_id)
    session.commit()
    return Response(status_code=204)


AlertIdPath = Annotated[int, Path(ge=1, le=2**63 - 1, description="The alert's id.")]


@router.post("/alerts/{alert_id}/ack", status_code=204, responses=documented(404, 409))
def acknowledge(
    alert_id: AlertIdPath, body: AckCreate, session: SessionDep, who: Admin
) -> Response:
    """Take a firing alert on: its repeats are recorded in the history and not sent. The
    history shows who acknowledged it, when and why."""
    silences.acknowledge(session, who, alert_id, body)
    session.commit()
    return Response(status_code=204)
