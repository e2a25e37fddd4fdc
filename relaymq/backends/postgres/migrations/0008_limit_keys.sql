-- 0008_limit_keys: limits per key within a queue (relaymq.limits: key_rate per key_per
-- seconds). A job's key is its limit_key; the queue's limits row keeps the current key window
-- (its index) and the starts counted in it per key, so that nothing else needs pruning.

ALTER TABLE relaymq_jobs ADD COLUMN limit_key text;
ALTER TABLE relaymq_limits ADD COLUMN key_rate integer;
ALTER TABLE relaymq_limits ADD COLUMN key_per double precision NOT NULL DEFAULT 1;
ALTER TABLE relaymq_limits ADD COLUMN key_win bigint NOT NULL DEFAULT 0;
ALTER TABLE relaymq_limits ADD COLUMN key_used jsonb NOT NULL DEFAULT '{}';
