-- Schema 2: exact limits across brokers (DESIGN §9). A limited grant's
-- uses and budgeted amounts are counted here, by guarded updates that the
-- database serializes on the grant's row (airlock_reserve, airlock_release):
-- N brokers under any concurrency never allow one use more. These rows are
-- the truth; grant_usage keeps phase 1's snapshots, read only for a grant
-- these tables do not hold. Amounts are numeric: sums are exact.

CREATE TABLE grant_count (
	grant_id text COLLATE "C" PRIMARY KEY,
	uses     bigint NOT NULL CHECK (uses >= 0)
);

CREATE TABLE grant_spend (
	grant_id text COLLATE "C" NOT NULL,
	key      text COLLATE "C" NOT NULL,
	spent    numeric NOT NULL CHECK (spent >= 0),
	PRIMARY KEY (grant_id, key)
);

-- Grants counted before this schema continue from their last snapshot.
INSERT INTO grant_count (grant_id, uses)
	SELECT grant_id, greatest(uses, 0) FROM grant_usage;
INSERT INTO grant_spend (grant_id, key, spent)
	SELECT u.grant_id, s.key, greatest(s.value::numeric, 0)
	FROM grant_usage u, json_each_text(u.spent) s
	WHERE u.spent IS NOT NULL AND json_typeof(u.spent) = 'object';

-- airlock_reserve takes one use of grant p_grant, and p_amounts[i] of each
-- budgeted key p_keys[i], unless its uses would pass p_max (0: unlimited)
-- or a key's spent total would pass p_budgets[i]. One statement, so one
-- transaction: either everything is taken or nothing (a refusal raises
-- AL001 grant exhausted, AL002 budget exceeded, and rolls back). Every
-- reservation of a grant locks its grant_count row first, so reservations
-- of one grant are serialized and never deadlock.
CREATE FUNCTION airlock_reserve(p_grant text, p_max bigint, p_keys text[], p_amounts numeric[], p_budgets numeric[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO grant_count (grant_id, uses) VALUES (p_grant, 0) ON CONFLICT (grant_id) DO NOTHING;
	UPDATE grant_count SET uses = uses + 1 WHERE grant_id = p_grant AND (p_max <= 0 OR uses < p_max);
	IF NOT FOUND THEN
		RAISE EXCEPTION 'grant exhausted' USING ERRCODE = 'AL001';
	END IF;
	FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
		INSERT INTO grant_spend (grant_id, key, spent) VALUES (p_grant, p_keys[i], 0) ON CONFLICT (grant_id, key) DO NOTHING;
		UPDATE grant_spend SET spent = spent + p_amounts[i]
			WHERE grant_id = p_grant AND key = p_keys[i] AND spent + p_amounts[i] <= p_budgets[i];
		IF NOT FOUND THEN
			RAISE EXCEPTION 'budget exceeded: %', p_keys[i] USING ERRCODE = 'AL002';
		END IF;
	END LOOP;
END $$;

-- airlock_release gives back one use and the amounts, never below zero
-- (the grant_count row first, as airlock_reserve).
CREATE FUNCTION airlock_release(p_grant text, p_keys text[], p_amounts numeric[])
RETURNS void LANGUAGE sql AS $$
	UPDATE grant_count SET uses = uses - 1 WHERE grant_id = p_grant AND uses > 0;
	UPDATE grant_spend s SET spent = greatest(s.spent - a.amount, 0)
		FROM unnest(p_keys, p_amounts) AS a(key, amount)
		WHERE s.grant_id = p_grant AND s.key = a.key;
$$;
