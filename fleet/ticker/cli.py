"""`fleet-ticker`: turns due schedule slots into run rows until stopped."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Sequence

from fleet.errors import ConfigError, DatabaseUnavailable
from fleet.observe import logs, telemetry
from fleet.process.settings import ticker_settings
from fleet.process.signals import on_stop_signal
from fleet.store.db import resolve_url
from fleet.ticker.loop import Ticker


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = ticker_settings(argv, os.environ)
        settings = dataclasses.replace(settings, database_url=resolve_url(settings.database_url))
    except ConfigError as e:
        print(f"fleet-ticker: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    # Its log's reader gone (`fleet-ticker | head -1`), the ticker stops as on SIGTERM.
    logs.configure(settings.log_format, on_output_gone=stop.set, process="ticker")
    telemetry.configure("fleet-ticker", settings.ticker_id, os.environ)

    def on_signal(sig: signal.Signals) -> None:
        try:
            if not stop.is_set():
                logs.event("stop_requested", signal=sig.name)
        finally:  # stop even if the line cannot be written
            stop.set()

    on_stop_signal(on_signal)
    try:
        return logs.exit_code(Ticker(settings, stop).run())
    except DatabaseUnavailable as e:
        print(f"fleet-ticker: {e}", file=sys.stderr)
        return 1
    finally:
        telemetry.flush()


if __name__ == "__main__":
    sys.exit(main())
