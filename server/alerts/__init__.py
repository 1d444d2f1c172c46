"""Alerting: evaluating rules over ingested steps (``rules``) and guarding where notices go."""
