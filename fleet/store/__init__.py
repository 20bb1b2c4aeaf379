"""The database: URLs and connections, pools, migrations, the named SQL statements, the embedded
PostgreSQL, the process registry and the chores the long-running processes share."""
