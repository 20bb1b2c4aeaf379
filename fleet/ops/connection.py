"""The database a fleetctl command works on: its URL, a connection, a fleet.Client, the schema check."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

import psycopg

from fleet.store.db import connect, resolve_url, url_params

if TYPE_CHECKING:
    from fleet.client import Client


def database_url(args: argparse.Namespace) -> str:
    """--database-url, else FLEET_DATABASE_URL, else the embedded server of the `fleetctl up` running
    in this directory; ConfigError naming the field when none is usable."""
    url = args.database_url or os.environ.get("FLEET_DATABASE_URL") or None
    if url:
        url_params(url, "--database-url" if args.database_url else "FLEET_DATABASE_URL")
    return resolve_url(url)


def db(args: argparse.Namespace, role: str = "fleetctl") -> psycopg.Connection[Any]:
    return connect(database_url(args), role)


def client(args: argparse.Namespace) -> Client:
    """The fleet.Client of the database the command names: the commands that an application can
    also run through a Client get their data through it, so both take one code path."""
    from fleet.client import Client  # the commands that read through a connection start without it

    return Client(database_url(args), application_name="fleetctl")


def require_schema(conn: psycopg.Connection[Any]) -> None:
    """Refuse (SchemaOutdated, exit 2) a database whose fleet schema is missing or older than this
    fleet's: only `fleetctl migrate` changes the schema, so the role that applies schedules needs no
    DDL rights."""
    from fleet.store.migrate import check_schema

    check_schema(conn)
