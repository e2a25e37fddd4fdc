-- 0011_meta: the meta store (relaymq.backends.meta): small records under a key, with a version
-- that every write raises and an optional expiry in seconds since the epoch (on the server's
-- clock, or the test clock given to the backend; NULL: never). Schedules and the registered
-- workers are copied in, in the form relaymq.schedules.store and relaymq.registry write;
-- leases start afresh. relaymq_schedules, relaymq_workers and relaymq_leases stay as they
-- were (a migration only adds) and are no longer used.

CREATE TABLE relaymq_meta (
    key     text   PRIMARY KEY,
    value   bytea  NOT NULL,
    version bigint NOT NULL,
    expires float8
);

CREATE INDEX relaymq_meta_expires ON relaymq_meta (expires) WHERE expires IS NOT NULL;

INSERT INTO relaymq_meta (key, value, version, expires)
SELECT 'schedule:' || id,
       convert_to(json_build_object('next_ms', next_ms, 'paused', paused)::text || E'\n',
                  'UTF8') || spec,
       1, NULL
FROM relaymq_schedules
ON CONFLICT (key) DO NOTHING;

INSERT INTO relaymq_meta (key, value, version, expires)
SELECT 'worker:' || id,
       convert_to(json_build_object(
           'id', id, 'queues', to_json(queues), 'concurrency', concurrency, 'host', host,
           'pid', pid, 'started_at', started_at, 'refused', refused,
           'ttl', extract(epoch FROM expires_at - seen_at)::float8)::text, 'UTF8'),
       1, extract(epoch FROM expires_at)::float8
FROM relaymq_workers
ON CONFLICT (key) DO NOTHING;
