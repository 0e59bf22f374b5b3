-- Schema 1 of Airlock's PostgreSQL store. Identifiers sort bytewise
-- (COLLATE "C"), as the embedded store's keys do: paging and "newest first"
-- do not depend on the database's locale. A zero time is NULL.

CREATE TABLE meta (
	key   text COLLATE "C" PRIMARY KEY,
	value bytea NOT NULL
);

CREATE TABLE sessions (
	id              text COLLATE "C" PRIMARY KEY,
	task_id         text NOT NULL,
	token_id        text NOT NULL,
	created_at      timestamptz,
	expires_at      timestamptz,
	revoked_at      timestamptz,
	untrusted_input boolean NOT NULL,
	isolation       integer NOT NULL,
	bind_cidr       text NOT NULL,
	labels          json,   -- {"name": "value", ...} or null
	created_by      text NOT NULL
);

CREATE TABLE grants (
	id                 text COLLATE "C" PRIMARY KEY,
	session_id         text COLLATE "C" NOT NULL,
	task_id            text NOT NULL,
	upstream           text NOT NULL,
	ttl_ns             bigint NOT NULL,
	max_uses           bigint NOT NULL,
	approval           text NOT NULL,
	approvals_required integer NOT NULL,
	budget             json,   -- {"body.amount": 1000, ...} or null
	rules              json,   -- a versioned rules record (records.go)
	created_at         timestamptz,
	expires_at         timestamptz,
	revoked_at         timestamptz,
	created_by         text NOT NULL
);
CREATE INDEX grants_by_session ON grants (session_id, id);

-- A grant's usage: the snapshot with the highest version wins, whatever
-- order snapshots arrive in (grants.Usage.Version).
CREATE TABLE grant_usage (
	grant_id text COLLATE "C" PRIMARY KEY,
	uses     bigint NOT NULL,
	spent    json,   -- {"body.amount": 70, ...} or null
	version  bigint NOT NULL
);

CREATE TABLE tokens (
	id         text COLLATE "C" PRIMARY KEY,
	name       text NOT NULL,
	role       text NOT NULL,
	digest     bytea,
	created_at timestamptz,
	expires_at timestamptz,
	created_by text NOT NULL
);

CREATE TABLE actions (
	id                 text COLLATE "C" PRIMARY KEY,
	session_id         text NOT NULL,
	task_id            text NOT NULL,
	grant_id           text NOT NULL,
	upstream           text NOT NULL,
	request_id         text NOT NULL,
	session_created_by text NOT NULL,
	created_at         timestamptz,
	expires_at         timestamptz,
	status             text NOT NULL,
	reason             text NOT NULL,
	req_method         text NOT NULL,
	req_path           text NOT NULL,
	req_query          text NOT NULL,
	req_header         json,   -- {"Name": ["value", ...]} or null
	req_body           bytea,
	pinned             text[],
	filled             text[],
	untrusted_input    boolean NOT NULL,
	sensitive_access   boolean NOT NULL,
	external_action    boolean NOT NULL,
	approvals_required integer NOT NULL,
	amounts            json,   -- {"body.amount": 50} or null
	permit_grants      text[],
	decisions          json,   -- a versioned decisions record (records.go)
	result             json    -- a versioned result record, or null
);
CREATE INDEX actions_pending ON actions (id) WHERE status = 'pending';

-- The audit chain: one for every broker on this database. audit_head is
-- its one head row: an append locks it (FOR UPDATE), seals its records
-- onto it, inserts them and moves it, in one transaction.
CREATE TABLE audit_head (
	one  boolean PRIMARY KEY DEFAULT true CHECK (one),
	seq  bigint NOT NULL,
	hash text NOT NULL
);
INSERT INTO audit_head (one, seq, hash) VALUES (true, 0, '');

CREATE TABLE audit (
	seq         bigint PRIMARY KEY,
	-- the record's session_id (null for none) and its SHA-256, which the
	-- index keys (a session id of any length)
	session_id  text,
	session_key bytea,
	data        bytea NOT NULL   -- the sealed record, byte for byte as hashed
);
CREATE INDEX audit_by_session ON audit (session_key, seq) WHERE session_key IS NOT NULL;

CREATE TABLE audit_checkpoints (
	seq       bigint PRIMARY KEY,
	hash      text NOT NULL,
	time      text NOT NULL,   -- RFC 3339 with nanoseconds, UTC: exactly what the signature covers
	anchor    boolean NOT NULL,
	signature text NOT NULL
);
