"""The worker role, `fleet-worker` (fleet.worker.cli): claims runs and runs their jobs."""


def main() -> int:
    """The `fleet-worker` executable: Ctrl-C is handled from its first instant, before its modules load."""
    from fleet.process.signals import interruptible

    return interruptible("fleet-worker", "fleet.worker.cli")
