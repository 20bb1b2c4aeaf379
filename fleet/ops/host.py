"""This host's installation, as `fleetctl up` and `fleetctl supervisor-config` both see it: where
fleet's programs are, and the grace period a stopping worker gets."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from fleet.errors import UsageError
from fleet.process.settings import DEFAULT_GRACE_S


def default_bin_dir() -> Path:
    """The directory holding fleetctl, fleet-worker and fleet-ticker of this installation."""
    here = Path(sys.executable).parent  # the virtual environment's bin (not resolved: it may be a link)
    if (here / "fleet-worker").exists():
        return here
    found = shutil.which("fleet-worker")
    return Path(found).parent if found else here


def default_grace() -> float:
    raw = os.environ.get("FLEET_GRACE")
    try:
        return float(raw) if raw else DEFAULT_GRACE_S
    except ValueError:
        raise UsageError(f"FLEET_GRACE: invalid value {raw!r}") from None
