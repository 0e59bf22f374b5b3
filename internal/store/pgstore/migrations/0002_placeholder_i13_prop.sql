-- Placeholder for schema 2, which belongs to the exact-limits work (issue
-- 13, another branch): it keeps this branch's versions gapless. At the
-- merge, delete this file and keep that branch's 0002_*.sql.
SELECT 1;
