-- 0013_key_max_active: a cap on the active jobs of each limit key (relaymq.limits:
-- key_max_active), and fairness between keys (fair, weights: JSON [[key, weight], ...]). A
-- limited claim counts the active jobs per key under the queue's limits row lock, as it
-- counts the queue's, so nothing else is stored for the cap; fair_served (JSON: limit key ->
-- starts in the current round) is the fair rotation's state. (0013 belongs to another line
-- of work; migrations are applied by name, so either order is fine.)

ALTER TABLE relaymq_limits ADD COLUMN key_max_active integer;
ALTER TABLE relaymq_limits ADD COLUMN fair boolean NOT NULL DEFAULT false;
ALTER TABLE relaymq_limits ADD COLUMN weights jsonb NOT NULL DEFAULT '[]';
ALTER TABLE relaymq_limits ADD COLUMN fair_served jsonb NOT NULL DEFAULT '{}';
