"""Alerting logic, with no database and no web framework: pure functions and the one HTTP
client that delivers.

- ``conditions``: what a rule checks (validated models); ``selectors``: which metrics and runs.
- ``evaluation``: a rule's state on one series, step by step, and its transitions.
- ``payloads``, ``signing``: what a notification says, and the webhook signature.
- ``channels``, ``targets``: the channels rules name, and where a webhook may point (no private
  or loopback address unless allowed).
- ``delivery``: one attempt to deliver, and when to try again.
"""
