"""The ticker role, `fleet-ticker` (fleet.ticker.cli): turns due slots into runs."""


def main() -> int:
    """The `fleet-ticker` executable: Ctrl-C is handled from its first instant, before its modules load."""
    from fleet.process.signals import interruptible

    return interruptible("fleet-ticker", "fleet.ticker.cli")
