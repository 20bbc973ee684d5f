"""Cron schedules live in ``stockade.policy.schedule`` (policy linting needs them too); re-exported here."""

from stockade.policy.schedule import Schedule, ScheduleError, parse_schedule

__all__ = ["Schedule", "ScheduleError", "parse_schedule"]
