"""The alert role, `fleetctl alert` (fleet.alert.command): tells a person when a schedule's verdict
changes, by webhook, Slack or e-mail, as the schedules file's [[alert]] routes say."""
