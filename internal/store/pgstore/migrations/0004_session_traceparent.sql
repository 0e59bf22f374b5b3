-- Schema 4: the operator's W3C trace context at a session's creation
-- (session.Session.Traceparent), which every call of the session's span
-- links to; '' for none (sessions created before).

ALTER TABLE sessions ADD COLUMN traceparent text NOT NULL DEFAULT '';
