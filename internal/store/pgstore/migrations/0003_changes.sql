-- Schema 3: the change feed every replica follows (kills, revokes, the
-- kill-switch, actions), and the owner and lease of an executing action.
-- A change row is written in the same transaction as the state change it
-- announces, under an EXCLUSIVE lock of the table, so ids become visible in
-- order; pg_notify('airlock_changes') in that transaction wakes listeners.

CREATE TABLE changes (
	id   bigserial PRIMARY KEY,
	kind text NOT NULL,   -- session.killed, grant.revoked, killswitch, action
	key  text NOT NULL,   -- the session, grant or action id ('' for the kill-switch)
	at   timestamptz NOT NULL DEFAULT now()
);

-- The replica executing an action (approval.Action.Owner) and until when
-- its claim holds unless renewed: after it, any replica fails the action.
ALTER TABLE actions ADD COLUMN owner text NOT NULL DEFAULT '';
ALTER TABLE actions ADD COLUMN lease_until timestamptz;
CREATE INDEX actions_executing ON actions (id) WHERE status = 'executing';
