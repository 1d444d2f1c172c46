"""Alert rules through the services: what a project may hold."""

from __future__ import annotations

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from normwatch.server.errors import Conflict
from normwatch.server.models import AlertRule
from normwatch.server.schemas.alerts import AlertRuleCreate
from normwatch.server.services.alert_rules import MAX_PROJECT_RULES, create_rule
from tests.helpers.principals import principal


def test_a_project_holds_a_bounded_number_of_rules(db_session: Session) -> None:
    who = principal(db_session)
    db_session.execute(
        insert(AlertRule),
        [
            {
                "project_id": who.project_id,
                "name": f"rule {i}",
                "metric": "loss",
                "condition": {"kind": "non_finite"},
                "channels": [],
                "run_name": "*",
                "run_tags": [],
            }
            for i in range(MAX_PROJECT_RULES)
        ],
    )
    body = AlertRuleCreate.model_validate(
        {"name": "one too many", "metric": "loss", "condition": {"kind": "non_finite"}}
    )
    with pytest.raises(Conflict, match="has 1000 rules, the most it may have"):
        create_rule(db_session, who, body, ())
