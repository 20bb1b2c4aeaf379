"""Schedules and timing: cron expressions, a schedule's slots, calendars, catch-up, windows, retry delays,
and the schedules file that declares them."""
