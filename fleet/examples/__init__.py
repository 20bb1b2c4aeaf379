"""Example schedules and jobs that `fleetctl up` brings to an empty database."""
