"""The jobs of a worker that registers both kinds (`fleet-worker --app loadtest.bench.mixed_jobs`):
the drain's sync jobs and the async section's `async def` job, for the jobsets section."""

from __future__ import annotations

from loadtest.bench import async_jobs, jobs

__all__ = ["async_jobs", "jobs"]  # importing them registers their jobs
