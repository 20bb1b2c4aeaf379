"""Driving a running supervisord over its unix socket (XML-RPC): list, start and stop fleet processes."""

from __future__ import annotations

import configparser
import http.client
import time
import xmlrpc.client
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.errors import FleetError
from fleet.process.supervisor import WORKER_GROUP, slot_number

_ACTIVE = ("RUNNING", "STARTING", "BACKOFF")
_STOPPED = ("STOPPED", "EXITED", "FATAL", "UNKNOWN")


class SupervisorUnavailable(FleetError):
    """supervisord does not answer on its control socket."""


@dataclass(frozen=True)
class ProcInfo:
    group: str
    name: str
    state: str
    pid: int
    description: str

    @property
    def slot(self) -> int | None:
        return slot_number(self.name) if self.group == WORKER_GROUP else None

    @property
    def full_name(self) -> str:
        return f"{self.group}:{self.name}"


@dataclass
class ScaleResult:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # slots that did not reach the state asked for
    running: int = 0
    slots: int = 0


def serverurl_from_config(path: Path) -> str:
    """The `[supervisorctl] serverurl` (or the `[unix_http_server] file`) of a supervisord config file."""
    parser = configparser.RawConfigParser(inline_comment_prefixes=(";",), strict=False)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as e:
        raise SupervisorUnavailable(f"cannot read {path}: {e.strerror}") from None
    except configparser.Error as e:
        raise SupervisorUnavailable(f"cannot parse {path}: {e}") from None
    if parser.has_option("supervisorctl", "serverurl"):
        return parser.get("supervisorctl", "serverurl").replace("%%", "%")
    if parser.has_option("unix_http_server", "file"):
        return "unix://" + parser.get("unix_http_server", "file").replace("%%", "%")
    raise SupervisorUnavailable(f"{path} names no control socket ([supervisorctl] serverurl)")


class Supervisor:
    """A client of one supervisord, over `unix:///path` (or `http://host:port`) XML-RPC."""

    def __init__(self, serverurl: str) -> None:
        self.serverurl = serverurl

    def _call(self, method: str, *args: Any) -> Any:
        from supervisor.xmlrpc import SupervisorTransport

        # A fresh connection per call: the transport's cached one is unusable after a failed request.
        transport = SupervisorTransport(None, None, self.serverurl)
        proxy: Any = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)
        try:
            return getattr(proxy.supervisor, method)(*args)
        except xmlrpc.client.Fault:
            raise
        except (OSError, xmlrpc.client.ProtocolError, http.client.HTTPException) as e:
            raise SupervisorUnavailable(f"supervisord at {self.serverurl} does not answer: {e}") from None
        finally:
            transport.close()

    def pid(self) -> int:
        return int(self._call("getPID"))

    def processes(self) -> list[ProcInfo]:
        return [
            ProcInfo(p["group"], p["name"], p["statename"], int(p["pid"]), p["description"])
            for p in self._call("getAllProcessInfo")
        ]

    def workers(self) -> list[ProcInfo]:
        """The worker slots, in slot order."""
        slots = [p for p in self.processes() if p.slot is not None]
        return sorted(slots, key=lambda p: p.slot or 0)

    def start(self, full_name: str) -> None:
        self._call("startProcess", full_name, False)

    def stop(self, full_name: str) -> None:
        self._call("stopProcess", full_name, False)

    def shutdown(self) -> None:
        self._call("shutdown")


def scale_workers(sv: Supervisor, n: int, timeout_s: float) -> ScaleResult:
    """Make slots 0..n-1 run and the others stop, touching no process already in the right state.

    Slots are stopped from the highest down, each gracefully (it finishes or hands back its runs).
    Waits up to `timeout_s` for every change to settle.
    """
    slots = sv.workers()
    result = ScaleResult(slots=len(slots))
    if n > len(slots):
        raise ValueError(f"this fleet has {len(slots)} worker slots")
    wanted = {p.name for p in slots[:n]}
    for p in slots[:n]:
        if p.state not in _ACTIVE:
            sv.start(p.full_name)
            result.started.append(p.name)
    for p in reversed(slots[n:]):
        if p.state not in _STOPPED:
            try:
                sv.stop(p.full_name)
            except xmlrpc.client.Fault as e:
                if "NOT_RUNNING" not in e.faultString:
                    raise
            result.stopped.append(p.name)
    end = time.monotonic() + timeout_s
    changing = set(result.started) | set(result.stopped)
    while True:
        states = {p.name: p.state for p in sv.workers()}
        done = {
            name
            for name in changing
            if (states[name] == "RUNNING" if name in wanted else states[name] in _STOPPED)
        }
        given_up = {name for name in changing if name in wanted and states[name] == "FATAL"}
        if done | given_up == changing or time.monotonic() > end:
            break
        time.sleep(0.2)
    result.failed = sorted(changing - done)
    result.running = sum(1 for s in states.values() if s == "RUNNING")
    return result
