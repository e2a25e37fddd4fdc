-- 0001_initial: the jobs table, its partial indexes, counters, queues, leases, workers.
-- Applied inside one transaction by relaymq.backends.postgres.migrations, in the schema that
-- is first on the connection's search_path. Later migrations only ever ADD: no migration drops
-- or rewrites user data.

CREATE SEQUENCE relaymq_job_seq;

-- One row per job. Times are timestamptz (server clock, or the test clock passed as a
-- parameter); payload, result and progress are opaque bytes (bytea: PostgreSQL text rejects NUL).
CREATE TABLE relaymq_jobs (
    queue            text        NOT NULL,
    id               text        NOT NULL,
    task             text        NOT NULL,
    payload          bytea       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('waiting', 'delayed', 'active',
                                     'completed', 'failed', 'expired', 'cancelled')),
    priority         integer     NOT NULL DEFAULT 0,
    seq              bigint      NOT NULL,
    created_at       timestamptz NOT NULL,
    run_at           timestamptz,
    ttl              float8,
    max_attempts     integer     NOT NULL DEFAULT 1,
    timeout          float8,
    attempts         integer     NOT NULL DEFAULT 0,
    token            bigint      NOT NULL DEFAULT 0,
    claimed_at       timestamptz,
    heartbeat_at     timestamptz,
    worker_id        text,
    stalls           integer     NOT NULL DEFAULT 0,
    cancel_requested boolean     NOT NULL DEFAULT false,
    progress         bytea,
    result           bytea,
    error            text,
    finished_at      timestamptz,
    PRIMARY KEY (queue, id)
);

-- The claimable set: waiting jobs in claim order. Claims read the head of this index only.
CREATE INDEX relaymq_jobs_waiting ON relaymq_jobs (queue, priority, seq)
    WHERE state = 'waiting';
-- Delayed jobs by run time: promotion and "due delayed jobs included" in claims.
CREATE INDEX relaymq_jobs_delayed ON relaymq_jobs (queue, run_at, seq)
    WHERE state = 'delayed';
-- Active jobs by their newest sign of life: the stall scan is a range read.
CREATE INDEX relaymq_jobs_active ON relaymq_jobs (queue, (greatest(heartbeat_at, claimed_at)))
    WHERE state = 'active';
-- Finished jobs by finish time: listing, clean and retention in batches.
CREATE INDEX relaymq_jobs_finished ON relaymq_jobs (queue, state, finished_at, seq)
    WHERE state IN ('completed', 'failed', 'expired', 'cancelled');

-- Jobs per (queue, state), split over a few slots so concurrent statements rarely wait on the
-- same row; counts() sums the slots. Kept by the statement-level triggers below.
CREATE TABLE relaymq_counts (
    queue text    NOT NULL,
    state text    NOT NULL,
    slot  integer NOT NULL,
    n     bigint  NOT NULL,
    PRIMARY KEY (queue, state, slot)
);

-- Queues with a pause flag (a row exists only while paused).
CREATE TABLE relaymq_queues (
    name      text        PRIMARY KEY,
    paused_at timestamptz NOT NULL
);

-- Leases for maintenance election; expiry uses the same clock as everything else.
CREATE TABLE relaymq_leases (
    name       text        PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The worker registry.
CREATE TABLE relaymq_workers (
    id          text        PRIMARY KEY,
    queues      text[]      NOT NULL,
    concurrency integer     NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    started_at  float8      NOT NULL,
    seen_at     timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- Events too large for a NOTIFY payload: the notification carries the row's id.
CREATE TABLE relaymq_events (
    id         bigserial   PRIMARY KEY,
    body       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The wake-up channel of this schema: 'relaymq_wake.<schema>' cut to an identifier's length.
CREATE FUNCTION relaymq_wake_channel(schema_name text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$ SELECT left('relaymq_wake.' || schema_name, 63) $$;

-- Statement-level counter and wake-up triggers: one upsert per (queue, state) touched by the
-- statement, into the slot of this backend process; one NOTIFY per queue that gained waiting
-- or delayed jobs (payload: the queue name).
CREATE FUNCTION relaymq_jobs_inserted() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO relaymq_counts AS c (queue, state, slot, n)
    SELECT queue, state, pg_backend_pid() % 8, count(*)
    FROM new_rows GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state, slot) DO UPDATE SET n = c.n + excluded.n;
    PERFORM pg_notify(relaymq_wake_channel(TG_TABLE_SCHEMA), q.queue)
    FROM (SELECT DISTINCT queue FROM new_rows WHERE state IN ('waiting', 'delayed')) q;
    RETURN NULL;
END $$;

CREATE FUNCTION relaymq_jobs_updated() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO relaymq_counts AS c (queue, state, slot, n)
    SELECT queue, state, pg_backend_pid() % 8, sum(d)
    FROM (
        SELECT queue, state, 1 AS d FROM new_rows
        UNION ALL
        SELECT queue, state, -1 AS d FROM old_rows
    ) delta
    GROUP BY queue, state HAVING sum(d) <> 0 ORDER BY queue, state
    ON CONFLICT (queue, state, slot) DO UPDATE SET n = c.n + excluded.n;
    PERFORM pg_notify(relaymq_wake_channel(TG_TABLE_SCHEMA), q.queue)
    FROM (SELECT DISTINCT queue FROM new_rows WHERE state IN ('waiting', 'delayed')) q;
    RETURN NULL;
END $$;

CREATE FUNCTION relaymq_jobs_deleted() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO relaymq_counts AS c (queue, state, slot, n)
    SELECT queue, state, pg_backend_pid() % 8, -count(*)
    FROM old_rows GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state, slot) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE TRIGGER relaymq_jobs_inserted AFTER INSERT ON relaymq_jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION relaymq_jobs_inserted();
CREATE TRIGGER relaymq_jobs_updated AFTER UPDATE ON relaymq_jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION relaymq_jobs_updated();
CREATE TRIGGER relaymq_jobs_deleted AFTER DELETE ON relaymq_jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION relaymq_jobs_deleted();
