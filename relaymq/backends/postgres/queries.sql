-- Named queries of the PostgreSQL backend, loaded through relaymq.backends.sqlfile.
--
-- Each query opens with "-- name: <name>", then says what goes in and what comes out.
-- Tables are written unqualified: the backend qualifies every relaymq_* name with its schema
-- when it loads this file (connection.py), so no connection depends on its search_path.
-- "now" is always coalesce(to_timestamp($n), now()): a test clock passes epoch seconds, NULL
-- means the server clock. Times go out as timestamptz (the driver turns them into datetimes).

-- fragment: sequence_free
-- Whether job j (waiting, or delayed and due) may start as far as its sequence goes
-- (relaymq.policy.sequence_head): it has none; or no earlier job of its (queue, sequence)
-- holds its place (waiting, delayed, active, or failed/expired with seq_failure 'hold') and
-- none of the sequence is active. The first reads relaymq_jobs_sequence (the jobs of
-- sequences in those five states, by enqueue order: sequence_pos) up to the first earlier
-- one; the second the queue's active jobs. Only the head of a sequence passes, and a claim
-- locks the rows it takes (FOR UPDATE SKIP LOCKED), so two claims never start two jobs of one
-- sequence from the same snapshot.
(j.sequence IS NULL OR (
    NOT EXISTS (
        SELECT 1 FROM relaymq_jobs o
        WHERE o.queue = j.queue AND o.sequence = j.sequence
          AND o.sequence IS NOT NULL
          AND o.state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
          AND o.sequence_pos < j.sequence_pos
          AND (o.state IN ('waiting', 'delayed', 'active') OR o.seq_failure = 'hold'))
    AND NOT EXISTS (
        SELECT 1 FROM relaymq_jobs o
        WHERE o.queue = j.queue AND o.state = 'active' AND o.sequence = j.sequence)))

-- fragment: sequence_free_settled
-- sequence_free for the claim part of "settle_claim" (and the page of "limits_view"): as if
-- the settles of the same statement (its "done" rows: queue, id, and the state each went to,
-- or goes to) had been applied
-- first, which the statement's snapshot cannot show. A job they ended leaves its sequence
-- (completed, cancelled, or dead-lettered with 'continue'), and is no longer active.
(j.sequence IS NULL OR (
    NOT EXISTS (
        SELECT 1 FROM relaymq_jobs o
        WHERE o.queue = j.queue AND o.sequence = j.sequence
          AND o.sequence IS NOT NULL
          AND o.state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
          AND o.sequence_pos < j.sequence_pos
          AND (o.state IN ('waiting', 'delayed', 'active') OR o.seq_failure = 'hold')
          AND NOT EXISTS (
              SELECT 1 FROM done d
              WHERE d.queue = o.queue AND d.id = o.id
                AND (d.state IN ('completed', 'cancelled')
                     OR (d.state IN ('failed', 'expired') AND o.seq_failure = 'continue'))))
    AND NOT EXISTS (
        SELECT 1 FROM relaymq_jobs o
        WHERE o.queue = j.queue AND o.state = 'active' AND o.sequence = j.sequence
          AND NOT EXISTS (SELECT 1 FROM done d WHERE d.queue = o.queue AND d.id = o.id))))

-- fragment: turned
-- The CTE "turned": the keys that had their turn in the fair round, from the CTE "f" (served:
-- JSON limit key -> its starts in the round, weights: JSON [[key, weight], ...]); a key's turn
-- is its weight, 1 by default.
turned AS (
    SELECT s.key FROM f, jsonb_each_text(f.served) s
    WHERE s.value::int >= coalesce(
        (SELECT (w ->> 1)::int FROM jsonb_array_elements(f.weights) w WHERE w ->> 0 = s.key), 1)
)

-- fragment: settling
-- The CTE "done" of a statement that reads queue $1 as if the settles of the claim's own last
-- statement ("claim_ids") had applied, as "settle" does: $5 ids text[], $6 tokens int8[] and
-- $7 states text[], the state each goes to; those whose job is still active with that token
-- (queue, id, state, token), for <sequence_free_settled> and the counts.
done AS (
    SELECT j.queue, j.id, m.state, j.token
    FROM unnest($5::text[], $6::int8[], $7::text[]) AS m(id, token, state)
    JOIN relaymq_jobs j ON j.queue = $1 AND j.id = m.id AND j.token = m.token
                       AND j.state = 'active'
)

-- fragment: promote
-- The CTEs "due" and "promoted" (every column of each job promoted): up to $2 due delayed
-- jobs of queue $1 go to waiting, each with a new seq in promotion order (run time, then
-- seq); rows locked elsewhere are skipped. Needs a CTE "t" (now) before it.
due AS (
    SELECT x.queue, x.id, nextval('relaymq_job_seq') AS seq,
           'delayed'::text AS held  -- a column, not a literal: see "settle"
    FROM (
        SELECT j.queue, j.id
        FROM relaymq_jobs j, t
        WHERE j.queue = $1 AND j.state = 'delayed' AND j.run_at <= t.now
        ORDER BY j.run_at, j.seq
        LIMIT $2
        FOR UPDATE OF j SKIP LOCKED
    ) x
),
promoted AS (
    UPDATE relaymq_jobs j
    SET state = 'waiting', run_at = NULL, seq = due.seq
    FROM due
    WHERE j.queue = due.queue AND j.id = due.id AND j.state = due.held
    RETURNING j.*
)

-- name: create_schema
-- Template (not a prepared statement): {schema} is replaced by the quoted schema name.
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: migrations_lock
-- in: $1 text, the schema. Serialises migration runs on one schema until the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('relaymq.migrate:' || $1));

-- name: migrations_table
-- The ledger of applied migrations (created by the runner before the first migration).
CREATE TABLE IF NOT EXISTS relaymq_migrations (
    name       text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_applied
-- out: name of every applied migration, in order.
SELECT name FROM relaymq_migrations ORDER BY name;

-- name: migration_record
-- in: $1 text, the migration's name (file name without .sql).
INSERT INTO relaymq_migrations (name) VALUES ($1);

-- name: local_search_path
-- in: $1 text, the quoted schema. For the rest of this transaction only: the migrations'
-- scripts name their tables unqualified, and their functions keep this search_path.
SELECT set_config('search_path', $1, true);

-- name: session_settings
-- in: $1 text[] names, $2 text[] values of settings for the rest of the session (a session
-- pooler's connection: the pooler refuses them in the startup packet).
SELECT set_config(s.name, s.value, false) FROM unnest($1::text[], $2::text[]) AS s(name, value);

-- name: enqueue
-- Store new jobs in the order given; a (queue, id) that already exists, in the table or
-- earlier in the same batch, is skipped (a duplicate). Each stored job gets the next seq.
-- With a channel $12, the same statement also sends one notification there carrying the
-- enqueue's facts, stamped $14: per job, stored waiting, stored delayed, or a duplicate (not
-- stored), as relaymq.events.enqueue_facts describes them; events.py alone turns them into
-- events. Payload 't' || $13 || ':' || the facts' JSON object (notify.py).
-- It goes out at commit, so a subscriber never hears of a job before it can be read; the
-- caller keeps it under NOTIFY's size limit.
-- in:  $1 queue text[], $2 id text[], $3 task text[], $4 payload bytea[], $5 priority int[],
--      $6 delay float8[], $7 ttl float8[], $8 max_attempts int[], $9 timeout float8[],
--      $10 now float8|NULL, $11 traceparent text[], $12 channel text|NULL (no events),
--      $13 notification number text, $14 the events' time float8, $15 limit_key text[],
--      $16 sequence text[], $17 seq_failure text[] (NULL for a job without a sequence)
-- A job with a sequence keeps its seq as sequence_pos, its place in enqueue order (the caller
-- holds lock_sequences, so that order is the order of commits).
-- out: sent (notifications: 0 or 1), then queue, id of each stored job (NULLs: none was).
WITH t AS (SELECT coalesce(to_timestamp($10::float8), now()) AS now),
ins AS (
    INSERT INTO relaymq_jobs AS j (queue, id, task, payload, state, priority, seq, created_at,
                                   run_at, ttl, max_attempts, timeout, traceparent, limit_key,
                                   sequence, sequence_pos, seq_failure)
    SELECT n.queue, n.id, n.task, n.payload, n.state, n.priority, n.seq, n.now, n.run_at,
           n.ttl, n.max_attempts, n.timeout, n.traceparent, n.limit_key, n.sequence,
           CASE WHEN n.sequence IS NOT NULL THEN n.seq END, n.seq_failure
    FROM (
        SELECT u.queue, u.id, u.task, u.payload,
               CASE WHEN u.delay > 0 THEN 'delayed' ELSE 'waiting' END AS state,
               u.priority, nextval('relaymq_job_seq') AS seq, t.now,
               CASE WHEN u.delay > 0 THEN t.now + make_interval(secs => u.delay) END AS run_at,
               u.ttl, u.max_attempts, u.timeout, u.traceparent, u.limit_key, u.sequence,
               u.seq_failure, u.ord
        FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::int[], $6::float8[],
                    $7::float8[], $8::int[], $9::float8[], $11::text[], $15::text[],
                    $16::text[], $17::text[])
                 WITH ORDINALITY AS u(queue, id, task, payload, priority, delay, ttl,
                                      max_attempts, timeout, traceparent, limit_key, sequence,
                                      seq_failure, ord)
             CROSS JOIN t
        ORDER BY u.ord
    ) n
    ORDER BY n.ord
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING j.queue, j.id
),
asked AS (
    SELECT u.queue, u.id, u.delay, u.ord,
           row_number() OVER (PARTITION BY u.queue, u.id ORDER BY u.ord) = 1 AS first
    FROM unnest($1::text[], $2::text[], $6::float8[]) WITH ORDINALITY AS u(queue, id, delay, ord)
),
note AS (
    SELECT pg_notify($12, 't' || $13 || ':' || p.facts) AS sent
    FROM (
        SELECT json_build_object('at', $14::float8, 'enqueued', json_agg(json_build_array(
                   CASE WHEN NOT a.first OR ins.id IS NULL THEN 'duplicate'
                        WHEN a.delay > 0 THEN 'delayed' ELSE 'waiting' END,
                   a.queue, a.id) ORDER BY a.ord))::text AS facts
        FROM asked a LEFT JOIN ins ON ins.queue = a.queue AND ins.id = a.id
    ) p
    WHERE $12::text IS NOT NULL
)
-- count(*) reads every row of note (sending the notification, if any), and always gives the
-- one row that the stored jobs join
SELECT n.sent, ins.queue, ins.id
FROM (SELECT count(*) AS sent FROM note) n LEFT JOIN ins ON true;

-- name: tx_check
-- Before relaymq's first write on a caller's connection (tx.py): whether it reaches the
-- backend's tables. It cannot fail, so bad input leaves the caller's transaction as it was.
-- (relaymq's statements name their tables in the schema there: the caller's search_path
-- is left alone.)
-- in:  $1 schema text, $2 the backend's database text|NULL (not known: any)
-- out: one row: database (the connection's), ours (the schema holds relaymq's jobs table and
--      the database is $2).
SELECT current_database() AS database,
       to_regclass(quote_ident($1) || '.relaymq_jobs') IS NOT NULL
           AND current_database() = coalesce($2::text, current_database()) AS ours;

-- name: current_database
-- At connect: the name of the database the backend's jobs are in (out: one value).
SELECT current_database();

-- name: claim
-- Take up to $3 jobs in one statement: waiting jobs and due delayed jobs of the unpaused
-- queues of $1, queue order first, then priority, then FIFO (a due delayed job queues behind
-- the waiting ones of its priority: it enters the line now). Rows are locked with SKIP LOCKED,
-- so concurrent claims never wait for each other nor share a job. Due delayed jobs that were
-- locked but not taken are promoted to waiting with a new seq (at most $5 per queue per call).
-- Queues with limits are left out unless $6: their claims go one queue at a time, under the
-- lock of their limits row (limits.py), which this statement does not take.
-- in:  $1 queues text[], $2 worker_id text, $3 limit int, $4 now float8|NULL, $5 promote int,
--      $6 limited bool (true: the caller holds the limits row of the one queue in $1)
-- out: every column of each claimed job, in claim order, and sequence_held: when it took
--      fewer than $3, the queues of $1 with a waiting job of a sequence it passed over (not its
--      sequence's head: sequence_free), else NULL; one row of NULL job columns when it took
--      nothing.
-- "settle_claim" repeats this statement: change them together.
WITH t AS (SELECT coalesce(to_timestamp($4::float8), now()) AS now),
qs AS (
    SELECT q.name, q.ord
    FROM unnest($1::text[]) WITH ORDINALITY AS q(name, ord)
    WHERE NOT EXISTS (SELECT 1 FROM relaymq_queues p WHERE p.name = q.name)
      AND ($6 OR NOT EXISTS (SELECT 1 FROM relaymq_limits l WHERE l.queue = q.name))
),
ready AS (
    SELECT w.queue, w.id, qs.ord, w.priority, 0 AS late, NULL::timestamptz AS run_at, w.seq
    FROM qs CROSS JOIN LATERAL (
        SELECT j.queue, j.id, j.priority, j.seq
        FROM relaymq_jobs j
        WHERE j.queue = qs.name AND j.state = 'waiting' AND <sequence_free>
        ORDER BY j.priority, j.seq
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) w
),
due AS (
    SELECT d.queue, d.id, qs.ord, d.priority, 1 AS late, d.run_at, d.seq
    FROM qs CROSS JOIN t CROSS JOIN LATERAL (
        SELECT j.queue, j.id, j.priority, j.run_at, j.seq
        FROM relaymq_jobs j
        WHERE j.queue = qs.name AND j.state = 'delayed' AND j.run_at <= t.now
          AND <sequence_free>
        ORDER BY j.run_at, j.seq
        LIMIT $5
        FOR UPDATE SKIP LOCKED
    ) d
),
picked AS (
    SELECT * FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) c
    ORDER BY c.ord, c.priority, c.late, c.run_at, c.seq
    LIMIT $3
),
claimed AS (
    UPDATE relaymq_jobs j
    SET state = 'active', token = j.token + 1, attempts = j.attempts + 1,
        claimed_at = t.now, heartbeat_at = t.now, worker_id = $2, run_at = NULL
    FROM picked p, t
    WHERE j.queue = p.queue AND j.id = p.id
    RETURNING j.*
),
promoted AS (
    UPDATE relaymq_jobs j
    SET state = 'waiting', run_at = NULL, seq = nextval('relaymq_job_seq')
    FROM (
        SELECT d.queue, d.id FROM due d
        WHERE NOT EXISTS (SELECT 1 FROM picked p WHERE p.queue = d.queue AND p.id = d.id)
        ORDER BY d.run_at, d.seq
    ) x
    WHERE j.queue = x.queue AND j.id = x.id
    RETURNING j.id
),
held AS (
    SELECT CASE WHEN (SELECT count(*) FROM picked) < $3 THEN ARRAY(
        SELECT qs.name FROM qs WHERE EXISTS (
            SELECT 1 FROM relaymq_jobs j
            WHERE j.queue = qs.name AND j.sequence IS NOT NULL
              AND j.state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
              AND j.state = 'waiting'
              AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.queue = j.queue AND p.id = j.id)))
    END AS sequence_held
)
SELECT c.*, h.sequence_held
FROM held h
LEFT JOIN (claimed c JOIN picked p ON p.queue = c.queue AND p.id = c.id) ON true
ORDER BY p.ord, p.priority, p.late, p.run_at, p.seq;

-- name: heartbeat
-- Renew each claim still held (active, same token); store progress when given.
-- A row another transaction is writing (this worker's own settle of it, most often; or a
-- cancel, or stall recovery) is skipped, not waited for: the answer is then read from the last
-- committed row, and the next round renews. A renewal queued behind a settle would, once the
-- settle commits, lock the row it no longer matches until its own commit, and a claim in that
-- moment would pass over the job the settle just put back in line (SKIP LOCKED; I10).
-- in:  $1 queue text[], $2 id text[], $3 token int8[], $4 progress bytea[] (NULL: keep),
--      $5 now float8|NULL
-- out: per beat in order: held bool, cancel_requested bool (set only for a lost claim that
--      an operator cancelled while this token held it).
WITH t AS (SELECT coalesce(to_timestamp($5::float8), now()) AS now),
b AS (
    SELECT *, 'active'::text AS held  -- a column, not a literal: see "settle"
    FROM unnest($1::text[], $2::text[], $3::int8[], $4::bytea[])
        WITH ORDINALITY AS b(queue, id, token, progress, ord)
),
free AS (
    SELECT j.queue, j.id
    FROM relaymq_jobs j
    JOIN b ON j.queue = b.queue AND j.id = b.id
    WHERE j.state = b.held AND j.token = b.token
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
renewed AS (
    UPDATE relaymq_jobs j
    SET heartbeat_at = t.now, progress = coalesce(b.progress, j.progress)
    FROM b, t, free f
    WHERE j.queue = f.queue AND j.id = f.id AND j.queue = b.queue AND j.id = b.id
    RETURNING j.queue, j.id
),
cur AS (  -- the last committed row of each beat not renewed
    SELECT b.ord, j.state = b.held AND j.token = b.token AS held,
           j.token = b.token AND j.cancel_requested AS cancel_requested
    FROM b
    JOIN relaymq_jobs j ON j.queue = b.queue AND j.id = b.id
    WHERE NOT EXISTS (SELECT 1 FROM free f WHERE f.queue = b.queue AND f.id = b.id)
)
SELECT r.id IS NOT NULL OR coalesce(c.held, false) AS held,
       CASE WHEN r.id IS NOT NULL OR coalesce(c.held, false) THEN false
            ELSE coalesce(c.cancel_requested, false)
       END AS cancel_requested
FROM b
LEFT JOIN renewed r ON r.queue = b.queue AND r.id = b.id
LEFT JOIN cur c ON c.ord = b.ord
ORDER BY b.ord;

-- fragment: settled
-- The CTEs "s" (the settles $1..$7, $9, $10 of "settle", in order, each with the state it goes
-- to: target, and whether that ends the job: final) and "done" (the rows they changed: queue,
-- id, state, token), after a CTE "t" with the statement's now ($8): "settle" and every
-- statement that settles as it does.
s AS (
    SELECT u.*,
           CASE u.outcome
               WHEN 'complete' THEN 'completed'
               WHEN 'fail' THEN 'failed'
               WHEN 'expire' THEN 'expired'
               WHEN 'cancel' THEN 'cancelled'
               WHEN 'retry' THEN CASE WHEN u.delay > 0 THEN 'delayed' ELSE 'waiting' END
               ELSE 'waiting'
           END AS target,
           u.outcome IN ('complete', 'fail', 'expire', 'cancel') AS final,
           -- The fence compares with this column rather than a literal, so the planner
           -- cannot pick the partial index on active jobs (whose dead entries grow between
           -- vacuums) and looks each job up by its primary key: cost O(batch).
           'active'::text AS held
    FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::bytea[], $6::text[],
                $7::float8[], $9::float8[], $10::int4[])
        WITH ORDINALITY AS u(queue, id, token, outcome, result, error, delay, ran_for, keep, ord)
),
done AS (
    UPDATE relaymq_jobs j
    SET state = s.target,
        result = CASE WHEN s.outcome = 'complete' THEN s.result ELSE j.result END,
        error = CASE WHEN s.outcome = 'release' OR s.outcome = 'complete' THEN j.error
                     ELSE s.error END,
        finished_at = CASE WHEN s.final THEN t.now END,
        worker_id = NULL,
        run_at = CASE WHEN s.target = 'delayed' THEN t.now + make_interval(secs => s.delay) END,
        seq = CASE WHEN s.outcome = 'retry' THEN nextval('relaymq_job_seq') ELSE j.seq END,
        attempts = CASE WHEN s.outcome = 'release' THEN j.attempts - 1 ELSE j.attempts END,
        -- relaymq_with_attempt (0012), with its two common cases written out: PostgreSQL
        -- cannot inline that function, and a call costs more than the append itself
        attempt_history = (SELECT CASE
            WHEN s.keep <= 0 THEN j.attempt_history
            WHEN j.attempt_history IS NULL THEN jsonb_build_array(a.attempt)
            WHEN jsonb_typeof(j.attempt_history) = 'array'
                 AND jsonb_array_length(j.attempt_history) < s.keep
                THEN j.attempt_history || jsonb_build_array(a.attempt)
            ELSE relaymq_with_attempt(j.attempt_history, a.attempt, s.keep) END
            FROM (SELECT jsonb_build_object(
                'attempt', j.attempts, 'outcome', s.outcome,
                'started_at', extract(epoch FROM j.claimed_at),
                'ended_at', extract(epoch FROM t.now), 'worker', j.worker_id, 'ran_for', s.ran_for,
                'error', CASE WHEN s.outcome = 'complete' THEN NULL ELSE s.error END)) a(attempt))
    FROM s, t
    WHERE j.queue = s.queue AND j.id = s.id AND j.state = s.held AND j.token = s.token
    RETURNING j.queue, j.id, j.state, j.token
)

-- fragment: applied
-- Settle s's answer (with its "done" row d joined by queue, id and token): applied, or a
-- terminal outcome already applied with the same token (a lost reply); the job is read again
-- only when its settle did not apply.
CASE WHEN d.id IS NOT NULL THEN true
            WHEN NOT s.final THEN false
            ELSE coalesce((SELECT cur.state = s.target AND cur.token = s.token
                           FROM relaymq_jobs cur
                           WHERE cur.queue = s.queue AND cur.id = s.id), false)
       END

-- name: settle
-- Apply each fenced transition out of active: only a job still active with the claim's token
-- changes. A terminal outcome already applied with the same token (a lost reply) counts as
-- applied and changes nothing. Each answer is joined to the row changed by the token too: a
-- batch can hold an old claim's outcome beside the new claim's for the same job (a worker
-- that recovered its own stale job after a cut and ran it again), and only the new one applies.
-- in:  $1 queue text[], $2 id text[], $3 token int8[], $4 outcome text[] (Outcome values),
--      $5 result bytea[], $6 error text[], $7 delay float8[], $8 now float8|NULL,
--      $9 ran_for float8[], $10 keep int4[] (the attempt added to each job's attempt_history:
--      relaymq_with_attempt, 0012)
-- out: per settle in order: applied bool.
WITH t AS (SELECT coalesce(to_timestamp($8::float8), now()) AS now),
<settled>
SELECT <applied> AS applied
FROM s
LEFT JOIN done d ON d.queue = s.queue AND d.id = s.id AND d.token = s.token
ORDER BY s.ord;

-- name: settle_claim
-- "settle", then "claim" for the queues without limits, in one statement and one commit: a
-- worker's outcomes and its next jobs in one round trip. Both parts see the snapshot from
-- before the statement, so the claim never takes a job this settle changed (the settled jobs
-- were active), and the settle never touches a job the claim takes (they were waiting or
-- delayed): no row is changed twice. For the same reason the claim cannot see a job the
-- settle puts back in line, which must compete in it: the caller sends here only settles that
-- do not (no release, no retry without delay), and makes "settle" and "claim" of the others.
-- in:  $1..$10 as for "settle" ($8 now float8|NULL, $9 ran_for, $10 keep), $11 queues text[],
--      $12 worker_id text, $13 limit int, $14 promote int
-- out: the claimed jobs (every column) in claim order, each with applied bool[] (the settle's
--      answers in order) and sequence_held (as "claim" says); one row with NULL job columns
--      when nothing was claimed.
WITH t AS (SELECT coalesce(to_timestamp($8::float8), now()) AS now),
<settled>,
answers AS (
    SELECT array_agg(<applied> ORDER BY s.ord) AS applied
    FROM s
    LEFT JOIN done d ON d.queue = s.queue AND d.id = s.id AND d.token = s.token
),
qs AS (
    SELECT q.name, q.ord
    FROM unnest($11::text[]) WITH ORDINALITY AS q(name, ord)
    WHERE NOT EXISTS (SELECT 1 FROM relaymq_queues p WHERE p.name = q.name)
      AND NOT EXISTS (SELECT 1 FROM relaymq_limits l WHERE l.queue = q.name)
),
ready AS (
    SELECT w.queue, w.id, qs.ord, w.priority, 0 AS late, NULL::timestamptz AS run_at, w.seq
    FROM qs CROSS JOIN LATERAL (
        SELECT j.queue, j.id, j.priority, j.seq
        FROM relaymq_jobs j
        WHERE j.queue = qs.name AND j.state = 'waiting' AND <sequence_free_settled>
        ORDER BY j.priority, j.seq
        LIMIT $13
        FOR UPDATE SKIP LOCKED
    ) w
),
due AS (
    SELECT d.queue, d.id, qs.ord, d.priority, 1 AS late, d.run_at, d.seq
    FROM qs CROSS JOIN t CROSS JOIN LATERAL (
        SELECT j.queue, j.id, j.priority, j.run_at, j.seq
        FROM relaymq_jobs j
        WHERE j.queue = qs.name AND j.state = 'delayed' AND j.run_at <= t.now
          AND <sequence_free_settled>
        ORDER BY j.run_at, j.seq
        LIMIT $14
        FOR UPDATE SKIP LOCKED
    ) d
),
picked AS (
    SELECT * FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) c
    ORDER BY c.ord, c.priority, c.late, c.run_at, c.seq
    LIMIT $13
),
claimed AS (
    UPDATE relaymq_jobs j
    SET state = 'active', token = j.token + 1, attempts = j.attempts + 1,
        claimed_at = t.now, heartbeat_at = t.now, worker_id = $12, run_at = NULL
    FROM picked p, t
    WHERE j.queue = p.queue AND j.id = p.id
    RETURNING j.*
),
promoted AS (
    UPDATE relaymq_jobs j
    SET state = 'waiting', run_at = NULL, seq = nextval('relaymq_job_seq')
    FROM (
        SELECT d.queue, d.id FROM due d
        WHERE NOT EXISTS (SELECT 1 FROM picked p WHERE p.queue = d.queue AND p.id = d.id)
        ORDER BY d.run_at, d.seq
    ) x
    WHERE j.queue = x.queue AND j.id = x.id
    RETURNING j.id
),
held AS (
    SELECT CASE WHEN (SELECT count(*) FROM picked) < $13 THEN ARRAY(
        SELECT qs.name FROM qs WHERE EXISTS (
            SELECT 1 FROM relaymq_jobs j
            WHERE j.queue = qs.name AND j.sequence IS NOT NULL
              AND j.state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
              AND j.state = 'waiting'
              AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.queue = j.queue AND p.id = j.id)))
    END AS sequence_held
),
took AS (
    SELECT c.*, p.ord AS p_ord, p.priority AS p_priority, p.late AS p_late,
           p.run_at AS p_run_at, p.seq AS p_seq
    FROM claimed c JOIN picked p ON p.queue = c.queue AND p.id = c.id
)
SELECT a.applied, h.sequence_held, k.*
FROM answers a CROSS JOIN held h LEFT JOIN took k ON true
ORDER BY k.p_ord, k.p_priority, k.p_late, k.p_run_at, k.p_seq;

-- name: wait_check
-- Whether a waiting job of an unpaused queue of $1 exists, and the time until the earliest
-- delayed job of those queues is due.
-- in:  $1 queues text[], $2 now float8|NULL
-- out: one row: ready bool, next_due float8 seconds (NULL: no delayed job).
WITH t AS (SELECT coalesce(to_timestamp($2::float8), now()) AS now),
qs AS (
    SELECT q.name
    FROM unnest($1::text[]) AS q(name)
    WHERE NOT EXISTS (SELECT 1 FROM relaymq_queues p WHERE p.name = q.name)
)
SELECT EXISTS (
           SELECT 1 FROM qs CROSS JOIN LATERAL (
               SELECT 1 FROM relaymq_jobs j
               WHERE j.queue = qs.name AND j.state = 'waiting' LIMIT 1
           ) w
       ) AS ready,
       (SELECT extract(epoch FROM min(d.run_at) - t.now)::float8
        FROM qs CROSS JOIN LATERAL (
            SELECT j.run_at FROM relaymq_jobs j
            WHERE j.queue = qs.name AND j.state = 'delayed'
            ORDER BY j.run_at LIMIT 1
        ) d) AS next_due
FROM t;

-- name: recover_stalled
-- Return up to $5 stalled jobs of a queue to waiting (new seq, a stall counted) or, past
-- max_stalled, fail them. The CTE locks candidates with SKIP LOCKED; the UPDATE re-checks
-- "still active, same token, still stale", so a job that finished meanwhile is never touched.
-- in:  $1 queue text, $2 threshold float8 seconds, $3 max_stalled int, $4 now float8|NULL,
--      $5 batch int
-- out: id, state ('waiting': requeued, 'failed': into the DLQ) of each job changed.
WITH t AS (SELECT coalesce(to_timestamp($4::float8), now()) AS now),
stale AS (
    SELECT j.queue, j.id, j.token
    FROM relaymq_jobs j, t
    WHERE j.queue = $1 AND j.state = 'active'
      AND greatest(j.heartbeat_at, j.claimed_at) < t.now - make_interval(secs => $2)
    ORDER BY greatest(j.heartbeat_at, j.claimed_at)
    LIMIT $5
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE relaymq_jobs j
SET state = CASE WHEN j.stalls >= $3 THEN 'failed' ELSE 'waiting' END,
    stalls = CASE WHEN j.stalls >= $3 THEN j.stalls ELSE j.stalls + 1 END,
    error = CASE WHEN j.stalls >= $3
                 THEN format('stalled %s times (max_stalled=%s)', j.stalls + 1, $3::int)
                 ELSE j.error END,
    finished_at = CASE WHEN j.stalls >= $3 THEN t.now END,
    seq = CASE WHEN j.stalls >= $3 THEN j.seq ELSE nextval('relaymq_job_seq') END,
    worker_id = NULL
FROM stale s, t
WHERE j.queue = s.queue AND j.id = s.id AND j.state = 'active' AND j.token = s.token
  AND greatest(j.heartbeat_at, j.claimed_at) < t.now - make_interval(secs => $2)
RETURNING j.id, j.state;


-- name: get_jobs
-- in: $1 queue, $2 ids text[]. out: every column of each of those jobs that exists, any order.
-- (The ids as rows of a subquery, each looked up by the key: "id = ANY($2)", planned on an
-- empty table, filters the ids over a scan of the whole queue, a plan kept as the table grows;
-- tests/postgres/test_plans.py. cancel_jobs, remove_jobs, claim_ids and dependency_states do
-- the same; claim_delivered, live_deliveries and retry_jobs give the queue as a column beside
-- the ids.)
SELECT * FROM relaymq_jobs WHERE (queue, id) IN (SELECT $1::text, unnest($2::text[]));

-- name: list_waiting
-- in: $1 queue, $2 offset, $3 limit. out: waiting jobs in claim order (the claim index).
SELECT * FROM relaymq_jobs WHERE queue = $1 AND state = 'waiting'
ORDER BY priority, seq OFFSET $2 LIMIT $3;

-- name: list_delayed
-- in: $1 queue, $2 offset, $3 limit. out: delayed jobs by run time.
SELECT * FROM relaymq_jobs WHERE queue = $1 AND state = 'delayed'
ORDER BY run_at, seq OFFSET $2 LIMIT $3;

-- name: list_blocked
-- in: $1 queue, $2 offset, $3 limit. out: blocked jobs, in enqueue order.
SELECT * FROM relaymq_jobs WHERE queue = $1 AND state = 'blocked'
ORDER BY seq OFFSET $2 LIMIT $3;

-- name: list_active
-- in: $1 queue, $2 offset, $3 limit. out: active jobs, oldest claim first.
SELECT * FROM relaymq_jobs WHERE queue = $1 AND state = 'active'
ORDER BY claimed_at, seq OFFSET $2 LIMIT $3;

-- name: list_finished
-- in: $1 queue, $2 state (terminal), $3 offset, $4 limit. out: jobs, oldest finish first.
SELECT * FROM relaymq_jobs
WHERE queue = $1 AND state = $2 AND state IN ('completed', 'failed', 'expired', 'cancelled')
ORDER BY finished_at, seq OFFSET $3 LIMIT $4;

-- name: search_jobs
-- A page of the jobs of $1 in state $2 that a search matches (relaymq.records.search.
-- JobFilter.matches, carried out here), in the order of the listing of that state.
-- in:  $1 queue, $2 state, $3 offset, $4 limit, $5 id prefix, $6 part of the task name,
--      $7 created at or after, $8 created before (float8 seconds), $9 argument conditions
--      (a JSON array of [path, kind, value, steps]: search.conditions_json), each NULL for
--      none; $10 some bytes a payload that meets them holds (search.needle), looked for
--      before the payload is read as JSON (a payload that is not JSON text matches no
--      argument condition).
-- out: every column of each job found.
SELECT j.* FROM relaymq_jobs j
CROSS JOIN LATERAL (  -- the payload as JSON, read once per row, and only to search arguments
    SELECT CASE WHEN $9::jsonb IS NOT NULL AND substr(j.payload, 1, 1) = '\x7b'::bytea
                THEN convert_from(j.payload, 'UTF8')::jsonb END AS doc
) p
WHERE j.queue = $1 AND j.state = $2
  AND ($5::text IS NULL OR left(j.id, length($5::text)) = $5::text)
  AND ($6::text IS NULL OR strpos(j.task, $6::text) > 0)
  AND ($7::float8 IS NULL OR j.created_at >= to_timestamp($7::float8))
  AND ($8::float8 IS NULL OR j.created_at < to_timestamp($8::float8))
  AND ($10::bytea IS NULL OR position($10::bytea IN j.payload) > 0)
  AND ($9::jsonb IS NULL OR (p.doc IS NOT NULL AND NOT EXISTS (
      SELECT 1
      FROM jsonb_array_elements($9::jsonb) c,
           LATERAL (SELECT p.doc #> ARRAY(SELECT jsonb_array_elements_text(c->3)) AS v) x
      WHERE NOT coalesce(CASE c->>1
          WHEN 'has' THEN jsonb_typeof(x.v) IN ('string', 'number')
                          AND strpos(x.v #>> '{}', c->>2) > 0
          WHEN 'number' THEN jsonb_typeof(x.v) = 'number' AND x.v = c->2
          WHEN 'text' THEN jsonb_typeof(x.v) = 'string' AND x.v = c->2
          WHEN 'null' THEN jsonb_typeof(x.v) = 'null'
          ELSE x.v = c->2
      END, false))))
ORDER BY CASE WHEN $2 = 'waiting' THEN j.priority END,
         CASE WHEN $2 = 'delayed' THEN j.run_at END,
         CASE WHEN $2 = 'active' THEN j.claimed_at END,
         CASE WHEN $2 IN ('completed', 'failed', 'expired', 'cancelled') THEN j.finished_at END,
         j.seq
OFFSET $3 LIMIT $4;

-- name: counts
-- in: $1 queue. out: state, n for each state with counter rows (the slots summed).
SELECT state, sum(n)::int8 AS n FROM relaymq_counts WHERE queue = $1 GROUP BY state;

-- name: cancel_jobs
-- Cancel a batch: each waiting, delayed or active job of $2 becomes cancelled (an active
-- one keeps cancel_requested so its worker's heartbeat learns why).
-- in:  $1 queue, $2 ids text[], $3 now float8|NULL
-- out: id of each job cancelled now.
WITH t AS (SELECT coalesce(to_timestamp($3::float8), now()) AS now)
UPDATE relaymq_jobs j
SET state = 'cancelled', cancel_requested = (j.state = 'active'),
    error = 'cancelled by request', finished_at = t.now, worker_id = NULL, run_at = NULL
FROM t
WHERE (j.queue, j.id) IN (SELECT $1::text, unnest($2::text[]))
  AND j.state IN ('blocked', 'waiting', 'delayed', 'active')
RETURNING j.id;

-- name: retry_jobs
-- Operator retry of a batch: each failed, expired or cancelled job of $2 goes back to waiting with
-- its attempts and stalls reset, a new seq (given in the order of $2) and created_at = now.
-- in:  $1 queue, $2 ids text[], $3 now float8|NULL
-- out: id of each job retried now.
-- (The queue and the states as columns beside the ids, not literals: see "get_jobs". Planned on
-- an empty table, "queue = $1 AND state IN (...)" read every finished job by its state.)
WITH picked AS (
    SELECT j.queue, j.id, u.ord FROM relaymq_jobs j
    JOIN unnest(array_fill($1::text, ARRAY[cardinality($2::text[])]), $2::text[],
                array_fill('failed'::text, ARRAY[cardinality($2::text[])]),
                array_fill('expired'::text, ARRAY[cardinality($2::text[])]),
                array_fill('cancelled'::text, ARRAY[cardinality($2::text[])]))
        WITH ORDINALITY AS u(queue, id, failed, expired, cancelled, ord)
        ON j.queue = u.queue AND j.id = u.id AND j.state IN (u.failed, u.expired, u.cancelled)
    ORDER BY u.ord
    FOR UPDATE OF j
),
numbered AS (
    SELECT s.queue, s.id, nextval('relaymq_job_seq') AS seq
    FROM (SELECT queue, id FROM picked ORDER BY ord) s
)
UPDATE relaymq_jobs j
SET state = 'waiting', attempts = 0, stalls = 0, cancel_requested = false,
    finished_at = NULL, run_at = NULL, seq = n.seq,
    created_at = coalesce(to_timestamp($3::float8), now())
FROM numbered n
WHERE j.queue = n.queue AND j.id = n.id
RETURNING j.id;

-- name: remove_jobs
-- in: $1 queue, $2 ids text[]. out: id of each job deleted.
DELETE FROM relaymq_jobs WHERE (queue, id) IN (SELECT $1::text, unnest($2::text[])) RETURNING id;

-- name: pause
-- in: $1 queue, $2 now float8|NULL.
INSERT INTO relaymq_queues (name, paused_at)
VALUES ($1, coalesce(to_timestamp($2::float8), now()))
ON CONFLICT (name) DO NOTHING;

-- name: resume
-- Remove the pause flag and wake the queue's waiting workers.
-- in: $1 queue, $2 schema (names the wake-up channel).
WITH gone AS (DELETE FROM relaymq_queues WHERE name = $1)
SELECT pg_notify(relaymq_wake_channel($2), $1);

-- name: is_paused
-- in: $1 queue. out: one row: paused bool.
SELECT EXISTS (SELECT 1 FROM relaymq_queues WHERE name = $1) AS paused;

-- name: drain
-- in: $1 queue. out: one row: n, the number of blocked, waiting and delayed jobs deleted. The
-- jobs blocked on them go too, so they are told nothing (their dependency rows go first).
WITH forget AS (
    DELETE FROM relaymq_job_deps d USING relaymq_jobs j
    WHERE d.queue = $1 AND j.queue = $1 AND j.id = d.dep_id
      AND j.state IN ('blocked', 'waiting', 'delayed')
),
gone AS (
    DELETE FROM relaymq_jobs WHERE queue = $1 AND state IN ('blocked', 'waiting', 'delayed')
    RETURNING 1
)
SELECT count(*) AS n FROM gone;

-- name: clean
-- Delete up to $4 jobs in terminal state $2 that finished before now - $3 seconds (a batch:
-- callers repeat until fewer than $4 are deleted). Rows locked elsewhere are skipped.
-- in:  $1 queue, $2 state, $3 older_than float8 seconds, $4 batch int, $5 now float8|NULL
-- out: one row: n, the number deleted.
WITH t AS (SELECT coalesce(to_timestamp($5::float8), now()) AS now),
old AS (
    SELECT j.queue, j.id FROM relaymq_jobs j, t
    WHERE j.queue = $1 AND j.state = $2
      AND j.state IN ('completed', 'failed', 'expired', 'cancelled')
      AND j.finished_at < t.now - make_interval(secs => $3)
    ORDER BY j.finished_at
    LIMIT $4
    FOR UPDATE OF j SKIP LOCKED
),
gone AS (
    DELETE FROM relaymq_jobs j USING old
    WHERE j.queue = old.queue AND j.id = old.id RETURNING 1
)
SELECT count(*) AS n FROM gone;

-- name: obliterate_jobs
-- First step of obliterate: delete every job of $1 (the trigger zeroes its counters), and
-- the queue's dependency rows (so there is nothing to tell).
WITH deps AS (DELETE FROM relaymq_job_deps WHERE queue = $1)
DELETE FROM relaymq_jobs WHERE queue = $1;

-- name: obliterate_queue
-- Second step of obliterate (same transaction): the queue's counter rows, pause flag,
-- limits and history.
WITH flag AS (DELETE FROM relaymq_queues WHERE name = $1),
     limits AS (DELETE FROM relaymq_limits WHERE queue = $1),
     history AS (DELETE FROM relaymq_tallies WHERE queue = $1),
     by_task AS (DELETE FROM relaymq_task_tallies WHERE queue = $1),
     keys AS (DELETE FROM relaymq_job_keys WHERE queue = $1)
DELETE FROM relaymq_counts WHERE queue = $1;

-- name: list_queues
-- out: name of every queue that holds jobs or is paused, sorted.
SELECT queue AS name FROM relaymq_counts GROUP BY queue HAVING sum(n) > 0
UNION
SELECT name FROM relaymq_queues
ORDER BY name;

-- name: claim_delivered
-- DeliveryStore: claim each delivered (id, token) of queue $1 only while that job is waiting
-- with exactly that token and the queue is not paused; the claim is the ordinary one. A
-- delivery repeated in the batch is claimed once (the first); the repeats are stale.
-- A queue with limits is treated as paused unless $6 (as in "claim"). A job of a sequence is
-- claimed only as its sequence's head (sequence_free); else its delivery is held back.
-- in:  $1 queue text, $2 id text[], $3 token int8[], $4 worker_id text, $5 now float8|NULL,
--      $6 limited bool
-- out: no row when the queue is paused (the caller keeps the deliveries); else one row per
--      delivery in order: delivery_id, then every column of the claimed job (all NULL for a
--      stale delivery: gone, not waiting, or another token), then sequence_held: true for a
--      live delivery its sequence held back (job columns NULL; the caller keeps it).
WITH t AS (SELECT coalesce(to_timestamp($5::float8), now()) AS now),
open AS (
    SELECT NOT EXISTS (SELECT 1 FROM relaymq_queues p WHERE p.name = $1)
       AND ($6 OR NOT EXISTS (SELECT 1 FROM relaymq_limits l WHERE l.queue = $1)) AS ok
),
d AS (
    SELECT u.id, u.token, u.ord,
           u.ord = min(u.ord) OVER (PARTITION BY u.id, u.token) AS first,
           'waiting'::text AS held,  -- a column, not a literal: see "settle"
           $1::text AS queue  -- the same: see "get_jobs"
    FROM unnest($2::text[], $3::int8[]) WITH ORDINALITY AS u(id, token, ord)
),
claimed AS (
    UPDATE relaymq_jobs j
    SET state = 'active', token = j.token + 1, attempts = j.attempts + 1,
        claimed_at = t.now, heartbeat_at = t.now, worker_id = $4, run_at = NULL
    FROM d, t, open
    WHERE open.ok AND d.first
      AND j.queue = d.queue AND j.id = d.id AND j.state = d.held AND j.token = d.token
      AND <sequence_free>
    RETURNING j.*
)
SELECT d.id AS delivery_id, c.*,
       c.id IS NULL AND d.first AND EXISTS (
           SELECT 1 FROM relaymq_jobs s
           WHERE s.queue = $1 AND s.id = d.id AND s.token = d.token AND s.state = 'waiting'
             AND s.sequence IS NOT NULL) AS sequence_held
FROM d JOIN open ON open.ok
LEFT JOIN claimed c ON d.first AND c.id = d.id AND c.token = d.token + 1
ORDER BY d.ord;

-- name: promote_due
-- DeliveryStore: move up to $2 due delayed jobs of queue $1 to waiting, each with a new seq
-- in promotion order (run time, then seq). Rows locked elsewhere are skipped.
-- in:  $1 queue text, $2 limit int, $3 now float8|NULL
-- out: every column of each promoted job, in promotion order.
WITH t AS (SELECT coalesce(to_timestamp($3::float8), now()) AS now),
<promote>
SELECT * FROM promoted ORDER BY seq;

-- name: publish
-- Send notifications on channel $1, in the order given (one transaction keeps the order).
-- in: $1 channel text, $2 payloads text[].
SELECT pg_notify($1, u.payload)
FROM unnest($2::text[]) WITH ORDINALITY AS u(payload, ord)
ORDER BY u.ord;

-- name: store_event
-- An event too large for a NOTIFY payload; the notification carries the returned id.
-- in: $1 body bytea. out: id.
INSERT INTO relaymq_events (body) VALUES ($1) RETURNING id;

-- name: fetch_event
-- in: $1 id. out: body of a stored event (no row once pruned).
SELECT body FROM relaymq_events WHERE id = $1;

-- name: prune_events
-- Delete stored events older than $1 seconds (server clock: they are only a transport).
DELETE FROM relaymq_events WHERE created_at < now() - make_interval(secs => $1);


-- name: ping
-- The LISTEN connection's liveness check. out: one row.
SELECT 1;

-- name: add_tallies
-- in: $1 queues, $2 minutes, $3 completed, $4 retried, $5 failed (parallel arrays, one entry
-- per (queue, minute)). Adds to each minute's counters, in one statement.
INSERT INTO relaymq_tallies AS t (queue, minute, completed, retried, failed)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
ON CONFLICT (queue, minute) DO UPDATE SET
    completed = t.completed + EXCLUDED.completed,
    retried = t.retried + EXCLUDED.retried,
    failed = t.failed + EXCLUDED.failed;

-- name: add_task_tallies
-- in: $1 queues, $2 tasks, $3 minutes, $4 completed, $5 retried, $6 failed, $7 run_times and
-- $8 pickups (each as array text, '{1,0,2}') (parallel arrays, one entry per (queue, task,
-- minute)). Adds to each minute's counters of the task, histograms bucket by bucket.
INSERT INTO relaymq_task_tallies AS t
    (queue, task, minute, completed, retried, failed, run_times, pickups)
SELECT u.queue, u.task, u.minute, u.completed, u.retried, u.failed, u.run_times::bigint[],
       u.pickups::bigint[]
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
            $7::text[], $8::text[])
    AS u(queue, task, minute, completed, retried, failed, run_times, pickups)
ON CONFLICT (queue, minute, task) DO UPDATE SET
    completed = t.completed + EXCLUDED.completed,
    retried = t.retried + EXCLUDED.retried,
    failed = t.failed + EXCLUDED.failed,
    run_times = relaymq_add_counts(t.run_times, EXCLUDED.run_times),
    pickups = relaymq_add_counts(t.pickups, EXCLUDED.pickups);

-- name: tallies
-- in: $1 queue, $2 first minute. out: minute, task ('' for the counts kept per queue only),
-- completed, retried, failed, run_times, pickups, by minute, then task.
SELECT minute, '' AS task, completed, retried, failed, NULL::bigint[] AS run_times,
       NULL::bigint[] AS pickups
FROM relaymq_tallies WHERE queue = $1 AND minute >= $2
UNION ALL
SELECT minute, task, completed, retried, failed, run_times, pickups
FROM relaymq_task_tallies WHERE queue = $1 AND minute >= $2
ORDER BY minute, task;

-- name: prune_tallies
-- in: $1 minute: every queue's minutes before it.
WITH by_task AS (DELETE FROM relaymq_task_tallies WHERE minute < $1)
DELETE FROM relaymq_tallies WHERE minute < $1;

-- name: meta_get
-- in:  $1 key text, $2 now float8|NULL.
-- out: key, value, version, expires of the record, unless it is absent or lapsed.
SELECT key, value, version, expires FROM relaymq_meta
WHERE key = $1
  AND (expires IS NULL OR expires > coalesce($2::float8, extract(epoch FROM now())::float8));

-- name: meta_put
-- Write the record whatever is there, with a new version; forgets lapsed records on the way.
-- in:  $1 key text, $2 value bytea, $3 ttl float8 seconds|NULL (never lapses),
--      $4 now float8|NULL.
WITH t AS (SELECT coalesce($4::float8, extract(epoch FROM now())::float8) AS now),
lapsed AS (DELETE FROM relaymq_meta m USING t WHERE m.expires <= t.now AND m.key <> $1)
INSERT INTO relaymq_meta AS m (key, value, version, expires)
SELECT $1, $2, 1, t.now + $3::float8 FROM t
ON CONFLICT (key) DO UPDATE
SET value = excluded.value, version = m.version + 1, expires = excluded.expires;

-- name: meta_create
-- Write the record only while there is none, or it has lapsed.
-- in:  $1 key text, $2 value bytea, $3 ttl float8|NULL, $4 now float8|NULL.
-- out: one row when this call wrote it.
INSERT INTO relaymq_meta AS m (key, value, version, expires)
VALUES ($1, $2, 1, coalesce($4::float8, extract(epoch FROM now())::float8) + $3::float8)
ON CONFLICT (key) DO UPDATE
SET value = excluded.value, version = m.version + 1, expires = excluded.expires
WHERE m.expires <= coalesce($4::float8, extract(epoch FROM now())::float8)
RETURNING m.version;

-- name: meta_swap
-- Compare and set: write the record only while it is live with version $2.
-- in:  $1 key text, $2 expected version bigint, $3 value bytea, $4 ttl float8|NULL,
--      $5 now float8|NULL.
-- out: one row when this call wrote it.
WITH t AS (SELECT coalesce($5::float8, extract(epoch FROM now())::float8) AS now)
UPDATE relaymq_meta AS m SET value = $3, version = m.version + 1, expires = t.now + $4::float8
FROM t
WHERE m.key = $1 AND m.version = $2 AND (m.expires IS NULL OR m.expires > t.now)
RETURNING m.version;

-- name: meta_list
-- in:  $1 prefix text, $2 now float8|NULL.
-- out: key, value, version, expires of each live record whose key starts with $1, by key.
SELECT key, value, version, expires FROM relaymq_meta
WHERE starts_with(key, $1)
  AND (expires IS NULL OR expires > coalesce($2::float8, extract(epoch FROM now())::float8))
ORDER BY key COLLATE "C";

-- name: meta_delete
-- in:  $1 key text, $2 now float8|NULL.
-- out: one row when a record was deleted: live, whether it had not lapsed.
DELETE FROM relaymq_meta WHERE key = $1
RETURNING
    expires IS NULL OR expires > coalesce($2::float8, extract(epoch FROM now())::float8) AS live;

-- name: lock_sequences
-- The first step of an enqueue with sequences, in its transaction: wait for every other
-- enqueue of the same (queue, sequence) pairs to commit, so that the seq each job keeps as
-- its place in the sequence (sequence_pos) follows the order of commits. Locks are taken in
-- the order given (sorted by the caller): two batches never wait for each other in a circle.
-- in:  $1 queues text[], $2 sequences text[]
SELECT pg_advisory_xact_lock(hashtextextended(u.queue || chr(2) || u.sequence, 0))
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(queue, sequence, ord)
ORDER BY u.ord;

-- name: sequence_held
-- A limited claim that took fewer jobs than it asked for (limits.py): whether queue $1 has a
-- waiting job of a sequence, which it then passed over (not its sequence's head), through
-- relaymq_jobs_sequence. in: $1 queue. out: one row: held bool.
SELECT EXISTS (
    SELECT 1 FROM relaymq_jobs j
    WHERE j.queue = $1 AND j.sequence IS NOT NULL
      AND j.state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
      AND j.state = 'waiting'
) AS held;

-- name: sequence_head
-- The earliest job of a sequence that holds its place (relaymq.policy.holds_sequence).
-- in: $1 queue, $2 sequence. out: every column of that job; no row when none does.
SELECT * FROM relaymq_jobs
WHERE queue = $1 AND sequence = $2 AND sequence IS NOT NULL
  AND state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
  AND (state IN ('waiting', 'delayed', 'active') OR seq_failure = 'hold')
ORDER BY sequence_pos LIMIT 1;

-- name: lock_key
-- The first step of a keyed enqueue (relaymq.job.KeyRule), in its transaction: wait for any
-- other enqueue of the same key to commit. A statement of its own, so that the next one's
-- snapshot sees what that enqueue wrote.
-- in:  $1 queue, $2 key
SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2, 0));

-- name: key_holder
-- The second step: who holds the key (what relaymq.policy.key_step decides from).
-- in:  $1 queue, $2 key, $3 job id, $4 now float8|NULL
-- out: one row: taken (the job id $3 exists already), holder (NULL: the key is free), in_window
--      (the holder's throttle window is still open) and the holder's state (NULL: gone).
SELECT EXISTS (SELECT 1 FROM relaymq_jobs WHERE queue = $1 AND id = $3) AS taken,
       k.job_id AS holder,
       k.until > coalesce(to_timestamp($4::float8), now()) AS in_window,
       j.state
FROM (SELECT 1) AS one
LEFT JOIN relaymq_job_keys k ON k.queue = $1 AND k.key = $2
LEFT JOIN relaymq_jobs j ON j.queue = k.queue AND j.id = k.job_id;

-- name: take_key
-- A keyed enqueue's last step, after relaymq.policy.key_step decided: job $3 holds key $2, and
-- the holder $5 it replaces (NULL: none) is deleted if it still waits (a worker may have
-- claimed it since key_holder read it; relaymq.policy.REPLACEABLE).
-- in:  $1 queue, $2 key, $3 job id, $4 window float8 seconds, $5 holder to replace, $6 now
-- out: one row: replaced (the id deleted, or NULL).
WITH gone AS (
    DELETE FROM relaymq_jobs
    WHERE queue = $1 AND id = $5 AND state IN ('waiting', 'delayed')
    RETURNING id
),
took AS (
    INSERT INTO relaymq_job_keys (queue, key, job_id, until)
    VALUES ($1, $2, $3, coalesce(to_timestamp($6::float8), now()) + make_interval(secs => $4))
    ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, until = excluded.until
)
SELECT (SELECT id FROM gone) AS replaced;

-- name: prune_keys
-- Forget the keys of queue $1 whose window ended more than $2 seconds ago and whose job is no
-- longer waiting, delayed or active. ($2 leaves a keyed enqueue in flight, whose new job this
-- statement's snapshot may not see yet, its key.)
-- in:  $1 queue, $2 older_than float8 seconds, $3 now float8|NULL
-- out: one row per key forgotten.
DELETE FROM relaymq_job_keys k
WHERE k.queue = $1
  AND k.until < coalesce(to_timestamp($3::float8), now()) - make_interval(secs => $2)
  AND NOT EXISTS (SELECT 1 FROM relaymq_jobs j
                  WHERE j.queue = k.queue AND j.id = k.job_id
                    AND j.state IN ('waiting', 'delayed', 'active'))
RETURNING k.key;

-- name: limited_queues
-- out: the name of every queue with limits.
SELECT queue FROM relaymq_limits;

-- name: list_limits
-- out: each queue's limits, by queue.
SELECT queue, max_active, rate, per, key_rate, key_per, key_max_active, fair,
       weights::text AS weights
FROM relaymq_limits ORDER BY queue;

-- name: set_limits
-- The windows' counts are kept. in: $1 queue, $2 max_active int|NULL, $3 rate int|NULL,
-- $4 per, $5 key_rate int|NULL, $6 key_per, $7 key_max_active int|NULL, $8 fair, $9 weights
-- (JSON text). The fair round is kept too.
INSERT INTO relaymq_limits (queue, max_active, rate, per, key_rate, key_per, key_max_active,
                            fair, weights)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)
ON CONFLICT (queue) DO UPDATE
SET max_active = excluded.max_active, rate = excluded.rate, per = excluded.per,
    key_rate = excluded.key_rate, key_per = excluded.key_per,
    key_max_active = excluded.key_max_active, fair = excluded.fair, weights = excluded.weights;

-- name: remove_limits
-- in: $1 queue.
DELETE FROM relaymq_limits WHERE queue = $1;

-- name: lock_limits
-- First step of a limited claim (its own transaction): take the queue's limits row, so the
-- claims of that queue take turns. in: $1 queue. out: the row and its version (see
-- "limits_view"), or none (no limits).
SELECT xmin::text AS version, max_active, rate, per, win, used, key_rate, key_per, key_win,
       key_used::text, key_max_active, fair, weights::text AS weights,
       fair_served::text AS fair_served
FROM relaymq_limits WHERE queue = $1 FOR UPDATE;

-- name: limits_view
-- The first step of an optimistic limited claim (no transaction, no lock): "lock_limits" and
-- "limits_active" in one statement, so that the row and the counts come from one snapshot,
-- with the row's version (its xmin, which every UPDATE of the row changes), and a first page
-- of candidates. The claim's last step ("claim_ids") applies only while the row still has that
-- version: no other claim of the queue counted its starts in between, and every claim of a
-- queue with limits does. What else changes meanwhile (jobs ending, recovered, enqueued) only
-- frees room.
-- in: $1 queue, $2 int, $3 now float8|NULL, $4 page int, $5 ids text[], $6 tokens int8[] and
-- $7 states text[]: the jobs the claim's own statement settles first ("claim_ids"), and
-- the states they go to; counted and read as if settled (the CTE "done": those still active
-- with that token; "claim_ids" claims only if it settles those very jobs).
-- out: the columns of "lock_limits" and
-- of "limits_active" (key_active counted when the queue has key_max_active), but for
-- fair_served: served_elsewhere, whether some key had its turn in the round ("keyed_candidates"
-- reads the map, and "claim_ids" adds to it); and the first $4 waiting jobs in claim order as
-- "keyed_candidates" with $8 reads them, past the keys at their cap by these counts (the
-- claim's budget decides; these only spare it the candidates it would refuse): page_ids,
-- page_keys, page_served (arrays, in that order; the jobs this statement promoted are not
-- among them). No row when the queue has no limits.
WITH t AS (SELECT coalesce(to_timestamp($3::float8), now()) AS now),
<promote>,
l AS (SELECT xmin::text AS version, * FROM relaymq_limits WHERE queue = $1),
<settling>,
ka AS (
    SELECT j.limit_key, count(*) AS n FROM relaymq_jobs j, l
    WHERE l.key_max_active IS NOT NULL AND j.queue = $1 AND j.state = 'active'
      AND j.limit_key IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM done d WHERE d.id = j.id)
    GROUP BY j.limit_key
),
f AS (SELECT CASE WHEN l.fair THEN l.fair_served ELSE '{}' END AS served, l.weights FROM l),
<turned>,
skipped AS (
    SELECT ka.limit_key AS key FROM ka, l WHERE ka.n >= l.key_max_active
    UNION ALL SELECT key FROM turned
),
page AS (
    SELECT j.id, j.limit_key, j.priority, j.seq,
           CASE WHEN l.fair THEN coalesce((l.fair_served ->> j.limit_key)::int, 0) END AS served
    FROM l, relaymq_jobs j
    WHERE j.queue = $1 AND j.state = 'waiting'
      AND (j.limit_key IS NULL OR j.limit_key NOT IN (SELECT key FROM skipped))
      AND <sequence_free_settled>
    ORDER BY j.priority, j.seq LIMIT $4
)
SELECT l.version, l.max_active, l.rate, l.per, l.win, l.used, l.key_rate,
       l.key_per, l.key_win, l.key_used::text, l.key_max_active, l.fair,
       l.weights::text AS weights, l.fair_served <> '{}' AS served_elsewhere,
       (SELECT count(*) FROM relaymq_jobs j
        WHERE j.queue = $1 AND j.state = 'active'
          AND NOT EXISTS (SELECT 1 FROM done d WHERE d.id = j.id)) AS active,
       (SELECT count(*) FROM done) AS settling,
       extract(epoch FROM t.now)::float8 AS now,
       (SELECT coalesce(jsonb_object_agg(ka.limit_key, ka.n), '{}') FROM ka)::text
           AS key_active,
       (SELECT count(*) FROM promoted) AS promoted,
       ARRAY(SELECT id FROM page ORDER BY priority, seq) AS page_ids,
       ARRAY(SELECT limit_key FROM page ORDER BY priority, seq) AS page_keys,
       ARRAY(SELECT served FROM page ORDER BY priority, seq) AS page_served
FROM l, t;

-- name: limits_active
-- Second step, in a statement of its own so that its snapshot is taken after the lock: every
-- claim that went before has committed. A claim with per-key limits promotes up to $2 due
-- delayed jobs of $1 here too (as "promote_due" does, 0: none), so that they join the line its
-- candidates are read from. in: $1 queue, $2 int, $3 now float8|NULL, $4 whether to count per
-- key. out: active, the queue's active jobs; now, the claim's time in seconds since the epoch;
-- key_active (JSON text: limit key -> its active jobs, stalled ones too; '{}' unless $4);
-- promoted, how many jobs were promoted.
WITH t AS (SELECT coalesce(to_timestamp($3::float8), now()) AS now),
<promote>
SELECT (SELECT count(*) FROM relaymq_jobs WHERE queue = $1 AND state = 'active') AS active,
       extract(epoch FROM t.now)::float8 AS now,
       (SELECT coalesce(jsonb_object_agg(k.limit_key, k.n), '{}')
        FROM (SELECT limit_key, count(*) AS n FROM relaymq_jobs
              WHERE $4::bool AND queue = $1 AND state = 'active' AND limit_key IS NOT NULL
              GROUP BY limit_key) k)::text AS key_active,
       (SELECT count(*) FROM promoted) AS promoted
FROM t;

-- name: live_deliveries
-- Of the deliveries (id, token) of queue $1, the ids (and limit keys) of the jobs that wait
-- with that token, and whether their sequence lets them start (free: sequence_free).
-- in: $1 queue, $2 id text[], $3 token int8[].
-- (The queue and the state as columns beside the ids, not literals: see "get_jobs".)
SELECT j.id, j.limit_key, <sequence_free> AS free FROM relaymq_jobs j
JOIN unnest(array_fill($1::text, ARRAY[cardinality($2::text[])]), $2::text[], $3::int8[],
            array_fill('waiting'::text, ARRAY[cardinality($2::text[])]))
    AS u(queue, id, token, held)
    ON j.queue = u.queue AND j.id = u.id AND j.token = u.token AND j.state = u.held;

-- name: count_starts
-- Last step: the rate windows the claim counted its starts in. in: $1 queue, $2 win, $3 used,
-- $4 key_win, $5 key_used (JSON: limit key -> starts in key_win), $6 fair_served (JSON: limit
-- key -> starts in the fair round).
UPDATE relaymq_limits SET win = $2, used = $3, key_win = $4, key_used = $5::jsonb,
                          fair_served = $6::jsonb
WHERE queue = $1;

-- name: keyed_candidates
-- A limited claim with key_rate or key_max_active: the first $3 waiting jobs of $1 in claim
-- order, past those of the keys in $2 (they used their window or are at their cap), and
-- whether a waiting job of one of the keys in $4 exists (keys that may start nothing more: the
-- claim leaves such a job out, so those keys held it back). With $5, past those of the keys
-- that had their turn in the fair round too, as the queue's fair_served says (its count against
-- the key's weight, 1 by default), and with each job its key's count (served). Read as if
-- the settles $5..$7 had applied (<settling>: "limits_view" says). in: $1 queue, $2 text[],
-- $3 int, $4 text[], $5..$7 (empty arrays: none), $8 bool. out: held bool, id, limit_key,
-- served int; one row with id NULL when there is no candidate.
-- (NOT IN over a subquery: a hashed lookup per row, however many keys $2 holds.)
WITH f AS (
    SELECT CASE WHEN $8::bool THEN l.fair_served ELSE '{}' END AS served, l.weights
    FROM relaymq_limits l WHERE l.queue = $1
),
<turned>,
<settling>
SELECT h.held, c.id, c.limit_key, c.served
FROM (SELECT cardinality($4::text[]) > 0 AND EXISTS (
          SELECT 1 FROM relaymq_jobs
          WHERE queue = $1 AND state = 'waiting' AND limit_key = ANY($4::text[])
      ) AS held) h
LEFT JOIN LATERAL (
    SELECT j.id, j.limit_key, j.priority, j.seq,
           coalesce(((SELECT served FROM f) ->> j.limit_key)::int, 0) AS served
    FROM relaymq_jobs j
    WHERE j.queue = $1 AND j.state = 'waiting'
      AND (j.limit_key IS NULL OR j.limit_key NOT IN (SELECT unnest($2::text[])))
      AND (j.limit_key IS NULL OR j.limit_key NOT IN (SELECT key FROM turned))
      AND <sequence_free_settled>
    ORDER BY j.priority, j.seq LIMIT $3
) c ON true
ORDER BY c.priority, c.seq;

-- name: claim_ids
-- The last step of a limited claim (limits.py), with the worker's outcomes: apply the settles
-- as "settle" does, then claim these waiting jobs of $11 as "claim" does and store the windows
-- it counted its starts in, as "count_starts" does, with the jobs claimed added to $18; only
-- while the queue's limits row has version $19 (its xmin, as read by "limits_view" or
-- "lock_limits") and the settles of $11 that applied are as many as $21 ("limits_view" read
-- that many as applying, and counted the claim as if they had: the same ones, active with
-- their token): else nothing is claimed or stored, and the settles apply all the same. The two
-- parts touch different rows (active ones, waiting ones); the caller sends no settle that puts
-- its job back in line (the claim could not see it). One commit for both.
-- in: $1..$10 as for "settle" (empty arrays: none; $8 now float8|NULL), $11 queue, $12 ids
-- text[], $13 worker_id, $14 win, $15 used before this claim, $16 key_win, $17 key_used, $18
-- fair_served (JSON text), $19 version, $20 whether $18 holds only the keys counted by this
-- claim (added to the stored map) rather than the whole map, $21 int.
-- out: applied bool[] (the settles' answers in order), won (whether the claim applied), and
-- every column of each job claimed; one row with id NULL when none was.
-- (The guard locks the row, waiting for a claim that holds it; a row changed meanwhile has a
-- new xmin, which its recheck then fails.)
WITH t AS (SELECT coalesce(to_timestamp($8::float8), now()) AS now),
<settled>,
answers AS (
    SELECT array_agg(<applied> ORDER BY s.ord) AS applied
    FROM s
    LEFT JOIN done d ON d.queue = s.queue AND d.id = s.id AND d.token = s.token
),
guard AS (
    SELECT 1 FROM relaymq_limits
    WHERE queue = $11 AND xmin = $19::text::xid
      AND (SELECT count(*) FROM done WHERE done.queue = $11) = $21
    FOR UPDATE
),
claimed AS (
    UPDATE relaymq_jobs j
    SET state = 'active', token = j.token + 1, attempts = j.attempts + 1,
        claimed_at = t.now, heartbeat_at = t.now, worker_id = $13, run_at = NULL
    FROM t
    WHERE (j.queue, j.id, j.state) IN (SELECT $11::text, unnest($12::text[]), 'waiting'::text)
      AND EXISTS (SELECT 1 FROM guard)
    RETURNING j.*
),
counted AS (
    UPDATE relaymq_limits
    SET win = $14, used = $15::int + (SELECT count(*) FROM claimed)::int, key_win = $16,
        key_used = $17::jsonb,
        fair_served = CASE WHEN $20::bool THEN fair_served || $18::jsonb ELSE $18::jsonb END
    WHERE queue = $11 AND EXISTS (SELECT 1 FROM guard)
)
SELECT a.applied, EXISTS (SELECT 1 FROM guard) AS won, c.*
FROM answers a LEFT JOIN claimed c ON true;

-- name: dependency_states
-- A dependent's enqueue (its own transaction): the dependencies that exist, and their states,
-- locked until the dependent and its rows in relaymq_job_deps are stored, so that none can end
-- unseen in between. in: $1 queue, $2 ids text[]. out: id, state.
SELECT id, state FROM relaymq_jobs WHERE (queue, id) IN (SELECT $1::text, unnest($2::text[]))
FOR SHARE;

-- name: set_dependencies
-- Second step, as relaymq.policy.dependencies_at_enqueue decided: the job just stored
-- (waiting) becomes blocked on $5 pending dependencies, or failed with $6.
-- in: $1 queue, $2 id, $3 depends_on text[], $4 policy, $5 pending int, $6 error|NULL,
--     $7 now float8|NULL.
UPDATE relaymq_jobs SET depends_on = $3, dep_policy = $4, pending_deps = $5,
    state = CASE WHEN $6::text IS NOT NULL THEN 'failed'
                 WHEN $5 > 0 THEN 'blocked' ELSE state END,
    error = $6,
    finished_at = CASE WHEN $6::text IS NOT NULL THEN coalesce(to_timestamp($7::float8), now()) END
WHERE queue = $1 AND id = $2;

-- name: add_dependencies
-- Last step: the job $3 learns when each of $2 ends. in: $1 queue, $2 dep ids, $3 dependent.
INSERT INTO relaymq_job_deps (queue, dep_id, dependent)
SELECT $1, d, $3 FROM unnest($2::text[]) AS d
ON CONFLICT DO NOTHING;

-- name: jobs_in_state
-- in: $1 queue, $2 state. out: every column of the queue's jobs in $2, any order. Only for a
-- state nobody knows, to quarantine those jobs (relaymq.backends.corrupt): no index covers it.
SELECT * FROM relaymq_jobs WHERE queue = $1 AND state = $2;

-- name: quarantine
-- Fail jobs whose rows cannot be read into the DLQ with the reason (relaymq.backends.corrupt:
-- the rule this applies). A job whose state changed since it was read is left alone.
-- in: $1 queues text[], $2 ids text[], $3 errors text[], $4 states text[] (each row's state as
--     read), $5 now float8|NULL. out: queue, id of each job failed.
UPDATE relaymq_jobs j SET state = 'failed', error = q.error, worker_id = NULL,
    finished_at = coalesce(to_timestamp($5::float8), now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS q(queue, id, error, state)
WHERE j.queue = q.queue AND j.id = q.id AND j.state = q.state
RETURNING j.queue, j.id;
