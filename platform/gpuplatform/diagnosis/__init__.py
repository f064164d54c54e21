"""Failure diagnosis, node health rules and attempts (docs/diagnosis.md).

- `engine`: the pure rule engine (no Django): rule tables as data, `diagnose`, `evaluate_health`.
- `tables`: the shipped tables (rules.yaml, health_rules.yaml, loaded once at start) plus the admins'
  rules from the database.
- `attempts`: an attempt's record when it ends (its diagnosis, the action on the retry, the repeat
  offender check) and its recovery time when the next attempt runs.
- `health`: a node's health signals judged by the health rules, the repair path, the topology audit.
"""
