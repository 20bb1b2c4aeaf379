"""The operator's tool, `fleetctl` (its commands: fleet.ops.cli)."""


def main() -> int:
    """The `fleetctl` executable: Ctrl-C is handled from its first instant, before its modules load."""
    from fleet.process.signals import interruptible

    return interruptible("fleetctl", "fleet.ops.cli")
