-- Alerts that reach a person (`fleetctl alert`). The routes come from the schedules file's [[alert]]
-- tables (written by `fleetctl apply`); they name the environment variables that hold their secrets,
-- never the secrets. The alert processes keep, per route, subject (a schedule, or '' for the fleet's
-- own verdicts) and verdict, the problem they told of (alert_state); every notice to send is a row of
-- alert_outbox, claimed by one alert process at a time (fenced on `attempts`, as a worker's run) and
-- retried with back-off while its receiver is down.

-- A schedule's optional deadline: each slot's run is done by slot + deadline, or the schedule is OVERDUE.
ALTER TABLE fleet.schedules ADD COLUMN deadline interval CHECK (deadline > interval '0');
CREATE INDEX schedules_deadline ON fleet.schedules (name) WHERE deadline IS NOT NULL;

CREATE TABLE fleet.alert_routes (
    name text PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('webhook', 'slack', 'email')),
    -- glob patterns of the schedule names the route covers, and the verdicts it tells of
    schedules text[] NOT NULL,
    verdicts text[] NOT NULL,
    -- an open problem is told again this often; NULL: once
    repeat interval CHECK (repeat > interval '0'),
    recovery boolean NOT NULL DEFAULT true,
    -- where notices go: the kind's settings (URLs and passwords by the name of their variable)
    target jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE fleet.alert_state (
    route text NOT NULL REFERENCES fleet.alert_routes (name) ON DELETE CASCADE,
    subject text NOT NULL,
    verdict text NOT NULL,
    opened_at timestamptz NOT NULL,
    last_sent_at timestamptz NOT NULL,
    notices integer NOT NULL DEFAULT 1,
    PRIMARY KEY (route, subject, verdict)
);

CREATE TABLE fleet.alert_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    route text NOT NULL REFERENCES fleet.alert_routes (name) ON DELETE CASCADE,
    subject text NOT NULL,
    verdict text NOT NULL,
    event text NOT NULL CHECK (event IN ('alert', 'repeat', 'recovery')),
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    -- grows on every claim: the fencing token of the claim's later writes
    attempts integer NOT NULL DEFAULT 0,
    next_at timestamptz NOT NULL DEFAULT now(),
    locked_by text,
    locked_until timestamptz,
    sent_at timestamptz,
    last_error text
);
-- The notices still to send, and those of one route and subject in order.
CREATE INDEX alert_outbox_open ON fleet.alert_outbox (route, subject, id) WHERE status IN ('pending', 'sending');
-- Sent and failed notices are removed after a while, oldest first.
CREATE INDEX alert_outbox_created ON fleet.alert_outbox (created_at);
