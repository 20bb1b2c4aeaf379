"""An operator's changes: applying schedules and alert routes, repairs of schedules and runs, and the audit
rows they leave."""
