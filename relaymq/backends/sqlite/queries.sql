-- Named queries of SQLiteBackend, loaded by sql.py. Each block starts with "-- name: <name>"
-- and holds ONE statement; the comment lines after the name say what goes in and comes out.
-- Parameters are named (:name). "<job>" in a statement stands for the job columns that the
-- fragment "job" below lists, written once (records.py reads them by position in that order).
-- Writes run inside begin_immediate ... COMMIT.

-- fragment: job
queue, id, task, payload, state, priority, seq, created_at, run_at, ttl, max_attempts, timeout,
attempts, token, claimed_at, heartbeat_at, worker_id, stalls, cancel_requested, progress, result,
error, finished_at, traceparent, depends_on, dep_policy, limit_key, sequence, seq_failure, rowid,
attempt_history

-- fragment: sequence_free
-- Whether a waiting row "jobs" may start as far as its sequence goes
-- (relaymq.policy.sequence_head): it has none; or no earlier job of its (queue, sequence)
-- holds its place (waiting, delayed, active, or failed/expired with seq_failure 'hold') and
-- none of the sequence is active. The first reads jobs_sequence (the jobs of sequences in those
-- five states, by enqueue order: sequence_pos) up to the first earlier one; the second the
-- queue's active jobs (jobs_active), as many as its workers run.
(jobs.sequence IS NULL OR (
    NOT EXISTS (
        SELECT 1 FROM jobs o
        WHERE o.queue = jobs.queue AND o.sequence = jobs.sequence
          AND o.sequence IS NOT NULL
          AND o.state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
          AND o.sequence_pos < jobs.sequence_pos
          AND (o.state IN ('waiting', 'delayed', 'active') OR o.seq_failure = 'hold'))
    AND NOT EXISTS (
        SELECT 1 FROM jobs o
        WHERE o.queue = jobs.queue AND o.state = 'active' AND o.sequence = jobs.sequence)))

-- fragment: search
-- A listing's search (relaymq.records.search.JobFilter.matches, carried out here): every
-- parameter NULL matches every job. :args is a JSON array of [path, kind, value, steps]
-- (search.conditions_json), read against the payload as JSON text; :needle (search.needle)
-- some bytes a payload that meets them holds, looked for first.
(:id_prefix IS NULL OR substr(id, 1, length(:id_prefix)) = :id_prefix)
AND (:task_part IS NULL OR instr(task, :task_part) > 0)
AND (:created_after IS NULL OR created_at >= :created_after)
AND (:created_before IS NULL OR created_at < :created_before)
AND (:needle IS NULL OR instr(payload, :needle) > 0)
AND (:args IS NULL OR (json_valid(CAST(payload AS TEXT)) AND NOT EXISTS (
    SELECT 1 FROM json_each(:args) c
    WHERE NOT coalesce(CASE json_extract(c.value, '$[1]')
        WHEN 'has' THEN json_type(CAST(payload AS TEXT), json_extract(c.value, '$[0]'))
                IN ('text', 'integer', 'real')
            AND instr(CAST(json_extract(CAST(payload AS TEXT), json_extract(c.value, '$[0]'))
                           AS TEXT), json_extract(c.value, '$[2]')) > 0
        WHEN 'number' THEN json_type(CAST(payload AS TEXT), json_extract(c.value, '$[0]'))
                IN ('integer', 'real')
            AND json_extract(CAST(payload AS TEXT), json_extract(c.value, '$[0]'))
                = json_extract(c.value, '$[2]')
        WHEN 'text' THEN json_type(CAST(payload AS TEXT), json_extract(c.value, '$[0]')) = 'text'
            AND json_extract(CAST(payload AS TEXT), json_extract(c.value, '$[0]'))
                = json_extract(c.value, '$[2]')
        ELSE json_type(CAST(payload AS TEXT), json_extract(c.value, '$[0]'))
            = json_extract(c.value, '$[1]')
    END, 0))))

-- fragment: history_with_attempt
-- The job's attempt history (a JSON array, oldest first) with the attempt this settle ends
-- added, the last :keep of them (relaymq.records.store.with_attempt; :keep 0 leaves it). The
-- entry is relaymq.job.Attempt's stored form, made of the row as it was before the UPDATE
-- (attempts, claimed_at, worker_id) and :outcome, :now, :ran_for, :error. An unreadable
-- history starts afresh rather than stopping the settle.
CASE WHEN :keep <= 0 THEN attempt_history ELSE (
    SELECT json_group_array(json(e.value)) FROM (
        SELECT key, value FROM json_each(json_insert(
            CASE WHEN json_valid(attempt_history) THEN attempt_history ELSE '[]' END, '$[#]',
            json_object('attempt', attempts, 'outcome', :outcome, 'started_at', claimed_at,
                        'ended_at', :now, 'worker', worker_id, 'ran_for', :ran_for,
                        'error', :error)))
        WHERE key > CASE WHEN json_valid(attempt_history)
                         THEN json_array_length(attempt_history) ELSE 0 END - :keep
        ORDER BY key
    ) e
) END

-- name: pragma_auto_vacuum
-- Before anything is written to a new file: freed pages are given back by incremental_vacuum
-- (an existing file keeps its mode until vacuum). Out: nothing. Persistent.
PRAGMA auto_vacuum = INCREMENTAL;

-- name: auto_vacuum
-- Out: one row, the file's auto-vacuum mode (0 none, 1 full, 2 incremental).
PRAGMA auto_vacuum;

-- name: vacuum
-- Outside any transaction: rewrites the file, so that pragma_auto_vacuum takes effect on a
-- file made before it (once per file; takes the write lock for as long as the copy lasts).
VACUUM;

-- name: incremental_vacuum
-- Inside begin_immediate: give up to 2000 free pages back to the file system (a pragma takes
-- no parameters; admin.VACUUM_PAGES says the same). Out: nothing worth reading.
PRAGMA incremental_vacuum(2000);

-- name: freelist_count
-- Out: one row, the number of free pages in the file.
PRAGMA freelist_count;

-- name: page_count
-- Out: one row, the number of pages in the file.
PRAGMA page_count;

-- name: pragma_wal
-- In: nothing. Out: one row, the journal mode now in force ('wal' expected). Persistent.
PRAGMA journal_mode = WAL;

-- name: pragma_synchronous_normal
-- WAL + NORMAL: a commit is in the OS before it returns, so a killed process loses nothing;
-- a power cut or OS crash may lose the last commits (never corrupts the file).
PRAGMA synchronous = NORMAL;

-- name: pragma_synchronous_full
-- WAL + FULL: the WAL is fsynced on every commit; survives power loss too, at a cost per commit.
PRAGMA synchronous = FULL;

-- name: pragma_recursive_triggers
-- Per connection: a trigger's own writes fire triggers too (a job failed because of its
-- dependency tells the jobs blocked on it, and so on; see upgrade_to_6).
PRAGMA recursive_triggers = ON;

-- name: recursive_triggers
-- Out: one row, 1 when the connection's triggers fire triggers recursively (a caller's
-- connection: tx.py turns it on while relaymq writes, then back off).
PRAGMA recursive_triggers;

-- name: pragma_no_recursive_triggers
PRAGMA recursive_triggers = OFF;

-- name: database_list
-- Out: one row per database of the connection: seq, name ('main' first), file ('' in memory).
PRAGMA database_list;

-- name: begin_deferred
-- How sqlite3 begins a transaction by default: the write lock is taken at the first write.
BEGIN DEFERRED;

-- name: begin_exclusive
BEGIN EXCLUSIVE;

-- name: schema_version
-- Out: one row, the schema version (0 for a fresh file).
PRAGMA user_version;

-- name: upgrade_to_2
-- Schema 1 -> 2: jobs.traceparent (TEXT, NULL unless tracing was on at enqueue). Run inside
-- begin_immediate after re-reading schema_version, so two processes never both add it.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;

-- name: set_version_2
PRAGMA user_version = 2;

-- name: upgrade_to_3
-- Schema 2 -> 3: the per-minute history of each queue's outcomes (the dashboard's charts).
CREATE TABLE IF NOT EXISTS tallies (
    queue     TEXT    NOT NULL,
    minute    INTEGER NOT NULL,
    completed INTEGER NOT NULL DEFAULT 0,
    retried   INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;

-- name: set_version_3
PRAGMA user_version = 3;

-- name: upgrade_to_4
-- Schema 3 -> 4: schedules (relaymq.schedules). The spec is opaque to this backend; next_ms
-- (the next tick, ms since the epoch) and paused are the state every scheduler shares.
CREATE TABLE IF NOT EXISTS schedules (
    id      TEXT    PRIMARY KEY,
    spec    BLOB    NOT NULL,
    next_ms INTEGER NOT NULL,
    paused  INTEGER NOT NULL DEFAULT 0
);

-- name: set_version_4
PRAGMA user_version = 4;

-- name: upgrade_to_5
-- Schema 4 -> 5: the throttle and debounce keys. A key names the job holding it, and until
-- when a throttle window holds it whatever that job's state.
CREATE TABLE IF NOT EXISTS job_keys (
    queue  TEXT NOT NULL,
    key    TEXT NOT NULL,
    job_id TEXT NOT NULL,
    until  REAL NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- name: set_version_5
PRAGMA user_version = 5;

-- name: upgrade_to_6
-- Schema 5 -> 6: queue limits (relaymq.limits): a cap on active jobs, a rate of starts per
-- window of `per` seconds, and the current window (its index) with the starts counted in it.
CREATE TABLE IF NOT EXISTS limits (
    queue      TEXT    NOT NULL PRIMARY KEY,
    max_active INTEGER,
    rate       INTEGER,
    per        REAL    NOT NULL,
    window     INTEGER NOT NULL DEFAULT 0,
    used       INTEGER NOT NULL DEFAULT 0,
    key_rate   INTEGER,
    key_per    REAL    NOT NULL DEFAULT 1,
    key_window INTEGER NOT NULL DEFAULT 0,
    key_used   TEXT    NOT NULL DEFAULT '{}'  -- JSON: limit key -> starts in key_window
) WITHOUT ROWID;
-- The key a job's per-key limits count it under (with_options(limit_key=...)).
ALTER TABLE jobs ADD COLUMN limit_key TEXT;

-- Jobs that wait for others (depends_on): the ids they wait for (a JSON array) and what they
-- do when one does not complete; while blocked, how many have not ended yet. job_deps lists,
-- per dependency, the jobs blocked on it (and the dependency's `dependents` is set, so that
-- the triggers below cost one column check for every other job); they tell them when it
-- ends, in the same transaction (recursive_triggers is on: a dependent failed in turn tells
-- its own).
ALTER TABLE jobs ADD COLUMN depends_on TEXT;
ALTER TABLE jobs ADD COLUMN dep_policy TEXT;
ALTER TABLE jobs ADD COLUMN pending_deps INTEGER;
ALTER TABLE jobs ADD COLUMN dependents INTEGER;  -- 1 once a job waits for this one
CREATE INDEX IF NOT EXISTS jobs_blocked ON jobs (queue, seq) WHERE state = 'blocked';
CREATE TABLE IF NOT EXISTS job_deps (
    queue     TEXT NOT NULL,
    dep_id    TEXT NOT NULL,
    dependent TEXT NOT NULL,
    PRIMARY KEY (queue, dep_id, dependent)
) WITHOUT ROWID;
-- mirrors relaymq.policy.dependency_ended (both triggers)
CREATE TRIGGER IF NOT EXISTS jobs_dependency_ended AFTER UPDATE OF state ON jobs
WHEN NEW.dependents IS NOT NULL
 AND NEW.state IN ('completed', 'failed', 'expired', 'cancelled')
 AND OLD.state IN ('blocked', 'waiting', 'delayed', 'active')
BEGIN
    UPDATE jobs SET state = 'failed', pending_deps = 0, finished_at = NEW.finished_at,
                    error = 'dependency ' || NEW.id || ' ended ' || NEW.state
    WHERE NEW.state <> 'completed' AND queue = NEW.queue AND state = 'blocked'
      AND dep_policy = 'fail'
      AND id IN (SELECT dependent FROM job_deps WHERE queue = NEW.queue AND dep_id = NEW.id);
    UPDATE jobs SET pending_deps = pending_deps - 1
    WHERE queue = NEW.queue AND state = 'blocked'
      AND id IN (SELECT dependent FROM job_deps WHERE queue = NEW.queue AND dep_id = NEW.id);
    UPDATE jobs SET state = 'delayed', run_at = NEW.finished_at
    WHERE queue = NEW.queue AND state = 'blocked' AND pending_deps <= 0
      AND id IN (SELECT dependent FROM job_deps WHERE queue = NEW.queue AND dep_id = NEW.id);
    DELETE FROM job_deps WHERE queue = NEW.queue AND dep_id = NEW.id;
END;
-- A dependency deleted before it ended: "removed". (A trigger cannot see the backend's clock;
-- this one reads the system's for the times it stores.)
CREATE TRIGGER IF NOT EXISTS jobs_dependency_removed AFTER DELETE ON jobs
WHEN OLD.dependents IS NOT NULL AND OLD.state IN ('blocked', 'waiting', 'delayed', 'active')
BEGIN
    UPDATE jobs SET state = 'failed', pending_deps = 0,
                    finished_at = (julianday('now') - 2440587.5) * 86400.0,
                    error = 'dependency ' || OLD.id || ' ended removed'
    WHERE queue = OLD.queue AND state = 'blocked' AND dep_policy = 'fail'
      AND id IN (SELECT dependent FROM job_deps WHERE queue = OLD.queue AND dep_id = OLD.id);
    UPDATE jobs SET pending_deps = pending_deps - 1
    WHERE queue = OLD.queue AND state = 'blocked'
      AND id IN (SELECT dependent FROM job_deps WHERE queue = OLD.queue AND dep_id = OLD.id);
    UPDATE jobs SET state = 'delayed', run_at = (julianday('now') - 2440587.5) * 86400.0
    WHERE queue = OLD.queue AND state = 'blocked' AND pending_deps <= 0
      AND id IN (SELECT dependent FROM job_deps WHERE queue = OLD.queue AND dep_id = OLD.id);
    DELETE FROM job_deps WHERE queue = OLD.queue AND dep_id = OLD.id;
END;

-- name: set_version_6
PRAGMA user_version = 6;

-- name: upgrade_to_7
-- Schema 6 -> 7: a job failed by its dependency (blocked -> failed: only the triggers above
-- write that) counts in the history's failed, at the minute of its failure, in the same
-- transaction; a worker counts only the outcomes it writes itself.
CREATE TRIGGER IF NOT EXISTS jobs_dependency_failed_tally AFTER UPDATE OF state ON jobs
WHEN OLD.state = 'blocked' AND NEW.state = 'failed'
BEGIN
    INSERT INTO tallies (queue, minute, failed)
    VALUES (NEW.queue, CAST(NEW.finished_at / 60 AS INTEGER), 1)
    ON CONFLICT (queue, minute) DO UPDATE SET failed = failed + 1;
END;

-- name: set_version_7
PRAGMA user_version = 7;

-- name: upgrade_to_8
-- Schema 7 -> 8: the queues a worker's backend refuses as configured, on its registration
-- (relaymq.worker.refusals): a JSON array of [queue, error] pairs.
ALTER TABLE workers ADD COLUMN refused TEXT NOT NULL DEFAULT '[]';

-- name: set_version_8
PRAGMA user_version = 8;

-- name: upgrade_to_9
-- Schema 8 -> 9: the meta store (relaymq.backends.meta): small records under a key, with a
-- version that every write raises and an optional expiry (seconds since the epoch, the
-- backend's clock; NULL: never). Schedules and registered workers move into it in the form
-- relaymq.schedules.store and relaymq.registry write; leases start afresh.
CREATE TABLE IF NOT EXISTS meta (
    key     TEXT    NOT NULL PRIMARY KEY,
    value   BLOB    NOT NULL,
    version INTEGER NOT NULL,
    expires REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS meta_expires ON meta (expires) WHERE expires IS NOT NULL;
INSERT OR IGNORE INTO meta (key, value, version, expires)
SELECT 'schedule:' || id,
       CAST(json_object('next_ms', next_ms, 'paused', json(CASE WHEN paused THEN 'true'
                        ELSE 'false' END)) || char(10) || spec AS BLOB),
       1, NULL
FROM schedules;
INSERT OR IGNORE INTO meta (key, value, version, expires)
SELECT 'worker:' || id,
       CAST(json_object('id', id, 'queues', json(queues), 'concurrency', concurrency,
                        'host', host, 'pid', pid, 'started_at', started_at,
                        'refused', json(refused), 'ttl', expires_at - seen_at) AS BLOB),
       1, expires_at
FROM workers;
DROP TABLE schedules;
DROP TABLE workers;
DROP TABLE locks;

-- name: set_version_9
PRAGMA user_version = 9;

-- name: upgrade_to_10
-- Schema 9 -> 10: each job's attempt history (a JSON array of relaymq.job.Attempt records,
-- written by every settle; NULL: none yet).
ALTER TABLE jobs ADD COLUMN attempt_history TEXT;
-- and the history per task, with durations: run times and pickup latencies counted per bucket
-- of relaymq.records.store.TIME_BUCKETS (JSON arrays). The tallies table keeps the counts per
-- queue only (jobs failed by a dependency, counted by a trigger).
CREATE TABLE IF NOT EXISTS task_tallies (
    queue     TEXT    NOT NULL,
    task      TEXT    NOT NULL,
    minute    INTEGER NOT NULL,
    completed INTEGER NOT NULL DEFAULT 0,
    retried   INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    run_times TEXT,
    pickups   TEXT,
    PRIMARY KEY (queue, minute, task)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS task_tallies_minute ON task_tallies (minute);

-- name: set_version_10
PRAGMA user_version = 10;

-- name: upgrade_to_11
-- Schema 10 -> 11: when each event was stored (the wall clock, seconds), so that the table
-- keeps recent events only (trim_old_events), not a number of rows that may each hold a
-- thousand jobs' events. Rows stored before have none and go by count (trim_events).
ALTER TABLE events ADD COLUMN at REAL;

-- name: set_version_11
PRAGMA user_version = 11;

-- name: upgrade_to_12
-- Schema 11 -> 12: a cap on the active jobs of each limit key (relaymq.limits: key_max_active), and
-- fairness between keys (fair, weights: JSON [[key, weight], ...]; fair_served: JSON, limit
-- key -> starts in the current round).
ALTER TABLE limits ADD COLUMN key_max_active INTEGER;
ALTER TABLE limits ADD COLUMN fair INTEGER NOT NULL DEFAULT 0;
ALTER TABLE limits ADD COLUMN weights TEXT NOT NULL DEFAULT '[]';
ALTER TABLE limits ADD COLUMN fair_served TEXT NOT NULL DEFAULT '{}';

-- name: set_version_12
PRAGMA user_version = 12;

-- name: upgrade_to_13
-- Schema 12 -> 13: sequences (relaymq.job.NewJob.sequence): a job's sequence, its place in
-- enqueue order (sequence_pos: its seq when it was enqueued, never changed after), what it
-- does to the sequence when dead-lettered (seq_failure: 'hold' or 'continue'), and the
-- index the claim reads them by (fragment sequence_free). Rows stored before have none.
ALTER TABLE jobs ADD COLUMN sequence TEXT;
ALTER TABLE jobs ADD COLUMN sequence_pos INTEGER;
ALTER TABLE jobs ADD COLUMN seq_failure TEXT;
CREATE INDEX IF NOT EXISTS jobs_sequence ON jobs (queue, sequence, sequence_pos)
    WHERE sequence IS NOT NULL
      AND state IN ('waiting', 'delayed', 'active', 'failed', 'expired');

-- name: set_version_13
PRAGMA user_version = 13;

-- name: begin_immediate
-- Takes the write lock at the start, so a transaction never fails half-way on a lock upgrade;
-- other writers wait up to the busy timeout, readers are never blocked (WAL).
BEGIN IMMEDIATE;

-- name: allocate_seq
-- The per-queue FIFO allocator. In: :queue, :n (how many numbers to take).
-- Out: one row, the LAST number taken; the block is (seq - n, seq].
INSERT INTO queues (queue, seq) VALUES (:queue, :n)
ON CONFLICT (queue) DO UPDATE SET seq = seq + excluded.seq
RETURNING seq;

-- name: existing_ids
-- In: :queue, :ids (JSON array of job ids). Out: the ids among them that already exist.
SELECT id FROM jobs WHERE queue = :queue AND id IN (SELECT value FROM json_each(:ids));

-- name: insert_job
-- In: one new job. Out: nothing (the counts trigger adds it to its state).
INSERT INTO jobs (queue, id, task, payload, state, priority, seq, created_at, run_at, ttl,
                  max_attempts, timeout, traceparent, depends_on, dep_policy, pending_deps,
                  limit_key, sequence, sequence_pos, seq_failure)
VALUES (:queue, :id, :task, :payload, :state, :priority, :seq, :now, :run_at, :ttl,
        :max_attempts, :timeout, :traceparent, :depends_on, :dep_policy, :pending_deps,
        :limit_key, :sequence, CASE WHEN :sequence IS NULL THEN NULL ELSE :seq END,
        :seq_failure);

-- name: dependency_states
-- In: :queue, :ids (JSON array). Out: (id, state) of those that exist.
SELECT id, state FROM jobs WHERE queue = :queue AND id IN (SELECT value FROM json_each(:ids));

-- name: add_dependency
-- In: :queue, :dep_id, :dependent. Out: nothing. The dependent learns when dep_id ends.
INSERT INTO job_deps (queue, dep_id, dependent) VALUES (:queue, :dep_id, :dependent)
ON CONFLICT DO NOTHING;

-- name: mark_dependency
-- In: :queue, :dep_id. Out: nothing. Its end fires the dependency triggers.
UPDATE jobs SET dependents = 1 WHERE queue = :queue AND id = :dep_id;

-- name: fail_dependent
-- In: :queue, :id, :error, :now. Out: nothing. A new job whose dependency already failed.
UPDATE jobs SET state = 'failed', error = :error, finished_at = :now
WHERE queue = :queue AND id = :id;

-- name: forget_pending_dependencies
-- In: :queue. Out: nothing. Before drain deletes the jobs that have not started: the jobs
-- blocked on them go too, so there is nothing to tell them.
DELETE FROM job_deps WHERE queue = :queue AND dep_id IN (
    SELECT id FROM jobs WHERE queue = :queue AND state IN ('blocked', 'waiting', 'delayed')
);

-- name: obliterate_dependencies
-- In: :queue. Out: nothing.
DELETE FROM job_deps WHERE queue = :queue;

-- name: is_paused
-- In: :queue. Out: one row when the queue is paused, none otherwise.
SELECT 1 FROM pauses WHERE queue = :queue;

-- name: queue_gate
-- In: :queue. Out: one row: whether the queue is paused, then its limits (max_active, rate,
-- per, window, used, key_rate, key_per, key_window, key_used, key_max_active, fair, weights,
-- fair_served; all NULL when it has none) and its active jobs.
SELECT EXISTS (SELECT 1 FROM pauses WHERE queue = :queue),
       l.max_active, l.rate, l.per, l.window, l.used, l.key_rate, l.key_per, l.key_window,
       l.key_used, l.key_max_active, l.fair, l.weights, l.fair_served,
       coalesce((SELECT n FROM counts WHERE queue = :queue AND state = 'active'), 0)
FROM (SELECT 1) LEFT JOIN limits l ON l.queue = :queue;

-- name: count_starts
-- In: :queue, :window, :used, :key_window, :key_used, :fair_served. Out: nothing. The rate
-- windows a claim counted its starts in, and the fair round.
UPDATE limits SET window = :window, used = :used, key_window = :key_window,
                  key_used = :key_used, fair_served = :fair_served
WHERE queue = :queue;

-- name: active_by_key
-- In: :queue. Out: (limit_key, active jobs) of each key with active jobs (stalled ones too).
SELECT limit_key, count(*) FROM jobs
WHERE queue = :queue AND state = 'active' AND limit_key IS NOT NULL
GROUP BY limit_key;

-- name: keyed_candidates
-- In: :queue, :spent (JSON array of keys that may start nothing more), :scan. Out: rowid and
-- limit_key of the first :scan waiting jobs in claim order, past those of spent keys.
SELECT rowid, limit_key FROM jobs
WHERE queue = :queue AND state = 'waiting'
  AND (limit_key IS NULL OR limit_key NOT IN (SELECT value FROM json_each(:spent)))
  AND <sequence_free>
ORDER BY priority, seq LIMIT :scan;

-- name: spent_waiting
-- In: :queue, :spent (JSON array of keys that may start nothing more), :picked (JSON array
-- of the rowids the claim takes). Out: one row, 1 when a waiting job of one of those keys
-- exists besides them (keyed_candidates left it out: the keys held it back).
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE queue = :queue AND state = 'waiting'
      AND limit_key IN (SELECT value FROM json_each(:spent))
      AND rowid NOT IN (SELECT value FROM json_each(:picked))
);

-- name: claim_rowids
-- In: :rowids (JSON array), :now, :worker_id. Out: <job> of each job taken, as "claim" does.
UPDATE jobs SET
    state = 'active',
    token = CASE WHEN typeof(token) = 'integer' THEN token + 1 ELSE token END,
    attempts = CASE WHEN typeof(attempts) = 'integer' THEN attempts + 1 ELSE attempts END,
    claimed_at = :now,
    heartbeat_at = :now,
    worker_id = :worker_id
WHERE rowid IN (SELECT value FROM json_each(:rowids)) AND state = 'waiting'
RETURNING <job>;

-- name: set_limits
-- In: :queue, :max_active, :rate, :per, :key_rate, :key_per, :key_max_active, :fair,
-- :weights. Out: nothing. The windows' counts and the fair round are kept.
INSERT INTO limits (queue, max_active, rate, per, key_rate, key_per, key_max_active, fair,
                    weights)
VALUES (:queue, :max_active, :rate, :per, :key_rate, :key_per, :key_max_active, :fair,
        :weights)
ON CONFLICT (queue) DO UPDATE SET
    max_active = excluded.max_active, rate = excluded.rate, per = excluded.per,
    key_rate = excluded.key_rate, key_per = excluded.key_per,
    key_max_active = excluded.key_max_active, fair = excluded.fair,
    weights = excluded.weights;

-- name: remove_limits
-- In: :queue. Out: nothing.
DELETE FROM limits WHERE queue = :queue;

-- name: list_limits
-- Out: (queue, max_active, rate, per, key_rate, key_per, key_max_active, fair, weights) of
-- every queue with limits.
SELECT queue, max_active, rate, per, key_rate, key_per, key_max_active, fair, weights
FROM limits ORDER BY queue;

-- name: due_delayed
-- In: :queue, :now. Out: rowid of each delayed job due at :now, in promotion order.
SELECT rowid FROM jobs
WHERE queue = :queue AND state = 'delayed' AND run_at <= :now
ORDER BY run_at, seq;

-- name: promote
-- In: :rowid, :seq (a fresh FIFO number). Out: nothing. The job joins the end of its line.
UPDATE jobs SET state = 'waiting', run_at = NULL, seq = :seq
WHERE rowid = :rowid AND state = 'delayed';

-- name: claim
-- In: :queue, :limit, :now, :worker_id. Out: <job> of each job taken (in no particular order).
-- Takes the head of the line (priority, then FIFO) through jobs_waiting. A token or attempts
-- value that is not an integer is left as it is, so the reader sees the damage and fails the job
-- instead of handing out a made-up token.
UPDATE jobs SET
    state = 'active',
    token = CASE WHEN typeof(token) = 'integer' THEN token + 1 ELSE token END,
    attempts = CASE WHEN typeof(attempts) = 'integer' THEN attempts + 1 ELSE attempts END,
    claimed_at = :now,
    heartbeat_at = :now,
    worker_id = :worker_id
WHERE rowid IN (
    SELECT rowid FROM jobs WHERE queue = :queue AND state = 'waiting' AND <sequence_free>
    ORDER BY priority, seq LIMIT :limit
)
RETURNING <job>;

-- name: fail_corrupt
-- In: :rowid, :error, :now. Out: nothing. Moves an unreadable job out of every line into the DLQ.
UPDATE jobs SET state = 'failed', error = :error, finished_at = :now, worker_id = NULL
WHERE rowid = :rowid;

-- name: stray_states
-- In: :queue. Out: (state) of each state of the queue's counters that holds jobs; the caller
-- picks those that are no job state (relaymq.backends.corrupt.state_problem).
SELECT state FROM counts WHERE queue = :queue AND n > 0;

-- name: jobs_in_state
-- In: :queue, :state. Out: <job> rows of the queue in :state, any order. Only for states no
-- index covers (a state nobody knows, to quarantine it): a scan of the queue's rows.
SELECT <job>
FROM jobs WHERE queue = :queue AND state = :state;

-- name: heartbeat
-- In: :queue, :id, :token, :now, :progress (NULL keeps the stored progress).
-- Out: nothing; changes() is 1 when the claim is held, 0 when it is lost.
UPDATE jobs SET heartbeat_at = :now, progress = coalesce(:progress, progress)
WHERE queue = :queue AND id = :id AND state = 'active' AND token = :token;

-- name: job_status
-- In: :queue, :id. Out: state, token, cancel_requested of the job, or no row.
SELECT state, token, cancel_requested FROM jobs WHERE queue = :queue AND id = :id;

-- name: settle_complete
-- In: :queue, :id, :token, :result, :now, and the attempt's :outcome, :ran_for, :error, :keep
-- (every settle takes these four: <history_with_attempt>). Out: nothing; changes() = 1 when
-- applied (fenced).
UPDATE jobs SET state = 'completed', result = :result, finished_at = :now, worker_id = NULL,
    attempt_history = <history_with_attempt>
WHERE queue = :queue AND id = :id AND state = 'active' AND token = :token;

-- name: settle_finish
-- FAIL, EXPIRE (the DLQ) and CANCEL. In: :queue, :id, :token, :state, :error, :now.
-- Out: nothing; changes() = 1 when applied (fenced).
UPDATE jobs SET state = :state, error = :error, finished_at = :now, worker_id = NULL,
    attempt_history = <history_with_attempt>
WHERE queue = :queue AND id = :id AND state = 'active' AND token = :token;

-- name: settle_retry_delayed
-- In: :queue, :id, :token, :error, :run_at. Out: nothing; changes() = 1 when applied (fenced).
UPDATE jobs SET state = 'delayed', run_at = :run_at, error = :error, worker_id = NULL,
    attempt_history = <history_with_attempt>
WHERE queue = :queue AND id = :id AND state = 'active' AND token = :token;

-- name: settle_retry_waiting
-- In: :queue, :id, :token, :error, :seq (fresh FIFO number).
-- Out: nothing; changes() = 1 when applied (fenced).
UPDATE jobs SET state = 'waiting', run_at = NULL, seq = :seq, error = :error, worker_id = NULL,
    attempt_history = <history_with_attempt>
WHERE queue = :queue AND id = :id AND state = 'active' AND token = :token;

-- name: settle_release
-- In: :queue, :id, :token. Out: nothing; changes() = 1 when applied (fenced).
-- Keeps seq, so the job goes back to its old place in line; gives back the attempt.
UPDATE jobs SET state = 'waiting', attempts = attempts - 1, worker_id = NULL,
    attempt_history = <history_with_attempt>
WHERE queue = :queue AND id = :id AND state = 'active' AND token = :token;

-- name: wait_probe
-- In: :queues (JSON array of queue names). Out: one row (ready, next_due): ready is 1 when an
-- unpaused queue has a waiting job; next_due is the earliest run_at of a delayed job of an
-- unpaused queue, or NULL. Index probes only (jobs_waiting, jobs_delayed).
SELECT
    EXISTS (
        SELECT 1 FROM json_each(:queues) AS q
        WHERE NOT EXISTS (SELECT 1 FROM pauses AS p WHERE p.queue = q.value)
          AND EXISTS (SELECT 1 FROM jobs AS j WHERE j.queue = q.value AND j.state = 'waiting')
    ) AS ready,
    (
        SELECT min((SELECT min(j.run_at) FROM jobs AS j
                    WHERE j.queue = q.value AND j.state = 'delayed'))
        FROM json_each(:queues) AS q
        WHERE NOT EXISTS (SELECT 1 FROM pauses AS p WHERE p.queue = q.value)
    ) AS next_due;

-- name: stalled
-- In: :queue, :cutoff. Out: <job> of each active job whose newer of heartbeat_at and
-- claimed_at is older than :cutoff (jobs_active).
SELECT <job>
FROM jobs
WHERE queue = :queue AND state = 'active' AND max(heartbeat_at, claimed_at) < :cutoff;

-- name: recover_requeue
-- In: :rowid, :token, :cutoff, :seq (fresh FIFO number). Out: nothing; changes() = 1 when the
-- job was still active, with the same token and still stale, and is now waiting again.
UPDATE jobs SET state = 'waiting', stalls = stalls + 1, worker_id = NULL, run_at = NULL,
                seq = :seq
WHERE rowid = :rowid AND state = 'active' AND token = :token
  AND max(heartbeat_at, claimed_at) < :cutoff;

-- name: recover_fail
-- In: :rowid, :token, :cutoff, :error, :now. Out: nothing; changes() = 1 when the job was still
-- active, same token, still stale, and is now failed (the poison-job guard).
UPDATE jobs SET state = 'failed', error = :error, finished_at = :now, worker_id = NULL
WHERE rowid = :rowid AND state = 'active' AND token = :token
  AND max(heartbeat_at, claimed_at) < :cutoff;


-- name: get_jobs
-- In: :queue, :ids (a JSON array of ids). Out: <job> rows of the ids that exist, any order.
SELECT <job>
FROM jobs WHERE queue = :queue AND id IN (SELECT value FROM json_each(:ids));

-- name: sequence_head
-- In: :queue, :sequence. Out: <job> of the earliest job of the sequence that holds its place
-- (relaymq.policy.holds_sequence), through jobs_sequence; no row when none does.
SELECT <job> FROM jobs
WHERE queue = :queue AND sequence = :sequence AND sequence IS NOT NULL
  AND state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
  AND (state IN ('waiting', 'delayed', 'active') OR seq_failure = 'hold')
ORDER BY sequence_pos LIMIT 1;

-- name: sequence_waiting
-- In: :queue. Out: one row, 1 when the queue has a waiting job of a sequence (a claim that
-- took fewer jobs than it could passed it over: not its sequence's head), else 0; through
-- jobs_sequence.
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE queue = :queue AND sequence IS NOT NULL
      AND state IN ('waiting', 'delayed', 'active', 'failed', 'expired')
      AND state = 'waiting'
);

-- name: list_waiting
-- Every listing takes the parameters of <search> too (all NULL: no search).
-- In: :queue, :limit, :offset. Out: <job> rows in claim order (jobs_waiting).
SELECT <job>
FROM jobs WHERE queue = :queue AND state = 'waiting'
AND <search>
ORDER BY priority, seq LIMIT :limit OFFSET :offset;

-- name: list_delayed
-- In: :queue, :limit, :offset. Out: <job> rows by run time (jobs_delayed).
SELECT <job>
FROM jobs WHERE queue = :queue AND state = 'delayed'
AND <search>
ORDER BY run_at, seq LIMIT :limit OFFSET :offset;

-- name: list_blocked
-- In: :queue, :limit, :offset. Out: <job> rows of blocked jobs, in enqueue order.
SELECT <job>
FROM jobs WHERE queue = :queue AND state = 'blocked'
AND <search>
ORDER BY seq LIMIT :limit OFFSET :offset;

-- name: list_active
-- In: :queue, :limit, :offset. Out: <job> rows, oldest claim first. The active set is bounded
-- by the workers' concurrency, so sorting it is cheap.
SELECT <job>
FROM jobs WHERE queue = :queue AND state = 'active'
AND <search>
ORDER BY claimed_at, seq LIMIT :limit OFFSET :offset;

-- name: list_finished
-- In: :queue, :state (a terminal state), :limit, :offset. Out: <job> rows, oldest finish first
-- (jobs_finished; ties in insertion order).
SELECT <job>
FROM jobs WHERE queue = :queue AND state = :state AND finished_at IS NOT NULL
AND <search>
ORDER BY finished_at, rowid LIMIT :limit OFFSET :offset;

-- name: counts
-- In: :queue. Out: (state, n) rows from the counts table; states never seen are absent.
SELECT state, n FROM counts WHERE queue = :queue;

-- name: cancel
-- In: :queue, :id, :now. Out: nothing; changes() = 1 when a waiting, delayed or active job is
-- now cancelled. An active job keeps cancel_requested = 1 so its worker's heartbeat learns why
-- (SET reads the old state).
UPDATE jobs SET state = 'cancelled', cancel_requested = (state = 'active'),
                error = 'cancelled by request', finished_at = :now, worker_id = NULL
WHERE queue = :queue AND id = :id AND state IN ('blocked', 'waiting', 'delayed', 'active');

-- name: retry_job
-- In: :queue, :id, :seq (fresh FIFO number), :now. Out: nothing; changes() = 1 when a failed,
-- expired or cancelled job is waiting again with its attempts and stalls reset and
-- created_at = now (its TTL counts from the replay).
UPDATE jobs SET state = 'waiting', attempts = 0, stalls = 0, cancel_requested = 0,
                finished_at = NULL, run_at = NULL, seq = :seq, created_at = :now
WHERE queue = :queue AND id = :id AND state IN ('failed', 'expired', 'cancelled');

-- name: remove_job
-- In: :queue, :id. Out: nothing; changes() = 1 when the job existed.
DELETE FROM jobs WHERE queue = :queue AND id = :id;

-- name: pause
-- In: :queue. Out: nothing.
INSERT INTO pauses (queue) VALUES (:queue) ON CONFLICT (queue) DO NOTHING;

-- name: resume
-- In: :queue. Out: nothing.
DELETE FROM pauses WHERE queue = :queue;

-- name: drain
-- In: :queue. Out: nothing; changes() = the number of blocked, waiting and delayed jobs deleted.
DELETE FROM jobs WHERE rowid IN (
    SELECT rowid FROM jobs WHERE queue = :queue AND state = 'waiting'
    UNION ALL
    SELECT rowid FROM jobs WHERE queue = :queue AND state = 'delayed'
    UNION ALL
    SELECT rowid FROM jobs WHERE queue = :queue AND state = 'blocked'
);

-- name: clean
-- In: :queue, :state (terminal), :cutoff, :batch. Deletes the :batch oldest jobs of :state
-- that finished before :cutoff (callers repeat while a full batch goes).
-- Out: nothing; changes() = the number deleted.
DELETE FROM jobs WHERE rowid IN (
    SELECT rowid FROM jobs
    WHERE queue = :queue AND state = :state AND finished_at IS NOT NULL AND finished_at < :cutoff
    ORDER BY finished_at LIMIT :batch
);

-- name: obliterate_jobs
-- In: :queue. Out: nothing.
DELETE FROM jobs WHERE queue = :queue;

-- name: obliterate_counts
-- In: :queue. Out: nothing.
DELETE FROM counts WHERE queue = :queue;

-- name: obliterate_seq
-- In: :queue. Out: nothing.
DELETE FROM queues WHERE queue = :queue;

-- name: list_queues
-- Out: the names of queues that hold jobs or are paused, sorted.
SELECT queue FROM counts WHERE n > 0
UNION
SELECT queue FROM pauses
ORDER BY queue;

-- name: insert_event
-- In: :body, :at (the wall clock). Out: nothing.
INSERT INTO events (body, at) VALUES (:body, :at);

-- name: trim_events
-- In: :keep. Out: nothing. Keeps the newest :keep events (a rowid range delete: cheap).
DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - :keep;

-- name: trim_old_events
-- In: :cutoff (the wall clock). Out: nothing. Deletes the events stored before :cutoff: those
-- below the oldest kept one (ids grow with time; the scan stops at the first recent row, and
-- rows before it were trimmed by the previous publish).
DELETE FROM events WHERE id < (
    SELECT id FROM events WHERE at >= :cutoff OR at IS NULL ORDER BY id LIMIT 1
) AND at < :cutoff;

-- name: events_head
-- Out: one row, the id of the newest event (0 when there is none).
SELECT coalesce(max(id), 0) FROM events;

-- name: events_after
-- In: :after, :limit. Out: (id, body) of the events newer than :after, oldest first.
SELECT id, body FROM events WHERE id > :after ORDER BY id LIMIT :limit;

-- name: claim_delivered
-- DeliveryStore. In: :queue, :id, :token (the token the delivery was published for), :now,
-- :worker_id. Out: <job> when the job was waiting with exactly that token and is now active;
-- no row for a stale delivery (gone, not waiting, or another token).
UPDATE jobs SET
    state = 'active', token = token + 1, attempts = attempts + 1,
    claimed_at = :now, heartbeat_at = :now, worker_id = :worker_id
WHERE queue = :queue AND id = :id AND state = 'waiting' AND token = :token
RETURNING <job>;

-- name: delivery_live
-- DeliveryStore. In: :queue, :id, :token. Out: one row, its limit_key, while the job waits
-- with that token.
SELECT limit_key FROM jobs
WHERE queue = :queue AND id = :id AND state = 'waiting' AND token = :token;

-- name: due_delayed_page
-- DeliveryStore. In: :queue, :now, :limit. Out: rowid of up to :limit due delayed jobs, in
-- promotion order.
SELECT rowid FROM jobs
WHERE queue = :queue AND state = 'delayed' AND run_at <= :now
ORDER BY run_at, seq LIMIT :limit;

-- name: promote_returning
-- DeliveryStore. In: :rowid, :seq (a fresh FIFO number). Out: <job> of the promoted job.
UPDATE jobs SET state = 'waiting', run_at = NULL, seq = :seq
WHERE rowid = :rowid AND state = 'delayed'
RETURNING <job>;

-- name: add_tally
-- In: :queue, :minute, :completed, :retried, :failed. Adds to the minute's counters.
INSERT INTO tallies (queue, minute, completed, retried, failed)
VALUES (:queue, :minute, :completed, :retried, :failed)
ON CONFLICT (queue, minute) DO UPDATE SET
    completed = completed + excluded.completed,
    retried = retried + excluded.retried,
    failed = failed + excluded.failed;

-- name: tallies
-- In: :queue, :since. Out: minute, task ('' for counts kept per queue only), completed,
-- retried, failed, run_times, pickups (JSON arrays or NULL), by minute, then task.
SELECT minute, '' AS task, completed, retried, failed, NULL, NULL FROM tallies
WHERE queue = :queue AND minute >= :since
UNION ALL
SELECT minute, task, completed, retried, failed, run_times, pickups FROM task_tallies
WHERE queue = :queue AND minute >= :since
ORDER BY 1, 2;

-- name: task_tally_durations
-- In: :queue, :task, :minute. Out: run_times, pickups of that minute's task tally (no row: none).
SELECT run_times, pickups FROM task_tallies
WHERE queue = :queue AND minute = :minute AND task = :task;

-- name: add_task_tally
-- In: :queue, :task, :minute, :completed, :retried, :failed, and :run_times, :pickups (JSON
-- arrays: the minute's stored histograms already added to, task_tally_durations, in the same
-- write transaction). Adds to the minute's counters of the task.
INSERT INTO task_tallies (queue, task, minute, completed, retried, failed, run_times, pickups)
VALUES (:queue, :task, :minute, :completed, :retried, :failed, :run_times, :pickups)
ON CONFLICT (queue, minute, task) DO UPDATE SET
    completed = completed + excluded.completed,
    retried = retried + excluded.retried,
    failed = failed + excluded.failed,
    run_times = excluded.run_times,
    pickups = excluded.pickups;

-- name: prune_tallies
-- In: :before. Every queue's minutes before it.
DELETE FROM tallies WHERE minute < :before;

-- name: prune_task_tallies
-- In: :before. Every queue's minutes before it, per task.
DELETE FROM task_tallies WHERE minute < :before;

-- name: obliterate_tallies
-- In: :queue.
DELETE FROM tallies WHERE queue = :queue;

-- name: obliterate_task_tallies
-- In: :queue.
DELETE FROM task_tallies WHERE queue = :queue;

-- name: obliterate_keys
-- In: :queue.
DELETE FROM job_keys WHERE queue = :queue;

-- name: prune_keys
-- In: :queue, :cutoff. Out: nothing; changes() is how many keys were forgotten: those whose
-- window ended before :cutoff and whose job is no longer waiting, delayed or active.
DELETE FROM job_keys
WHERE queue = :queue AND until < :cutoff
  AND NOT EXISTS (SELECT 1 FROM jobs AS j
                  WHERE j.queue = job_keys.queue AND j.id = job_keys.job_id
                    AND j.state IN ('waiting', 'delayed', 'active'));

-- name: key_holder
-- In: :queue, :key. Out: the job holding the key, until when, and that job's state (NULL when
-- it is gone); no row when no job ever took the key.
SELECT k.job_id, k.until, j.state
FROM job_keys AS k LEFT JOIN jobs AS j ON j.queue = k.queue AND j.id = k.job_id
WHERE k.queue = :queue AND k.key = :key;

-- name: take_key
-- In: :queue, :key, :job_id, :until. Out: nothing. The job now holds the key.
INSERT INTO job_keys (queue, key, job_id, until) VALUES (:queue, :key, :job_id, :until)
ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, until = excluded.until;

-- name: meta_get
-- In: :key, :now. Out: key, value, version, expires of the record, unless absent or lapsed.
SELECT key, value, version, expires FROM meta
WHERE key = :key AND (expires IS NULL OR expires > :now);

-- name: meta_prune
-- In: :now. Out: nothing. Forgets every lapsed record (meta_expires finds them).
DELETE FROM meta WHERE expires <= :now;

-- name: meta_put
-- In: :key, :value, :expires. Out: nothing. Writes the record whatever is there.
INSERT INTO meta (key, value, version, expires) VALUES (:key, :value, 1, :expires)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = meta.version + 1,
    expires = excluded.expires;

-- name: meta_create
-- In: :key, :value, :expires, :now. Out: nothing; changes() is 1 when there was no record or
-- it had lapsed (then it is written), 0 when a live one is there.
INSERT INTO meta (key, value, version, expires) VALUES (:key, :value, 1, :expires)
ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = meta.version + 1,
    expires = excluded.expires
WHERE meta.expires IS NOT NULL AND meta.expires <= :now;

-- name: meta_swap
-- In: :key, :expected, :value, :expires, :now. Out: nothing; changes() is 1 when the live
-- record had version :expected (compare and set), 0 otherwise.
UPDATE meta SET value = :value, version = version + 1, expires = :expires
WHERE key = :key AND version = :expected AND (expires IS NULL OR expires > :now);

-- name: meta_list
-- In: :prefix, :now. Out: key, value, version, expires of each live record whose key starts
-- with :prefix, by key.
SELECT key, value, version, expires FROM meta
WHERE key >= :prefix AND substr(key, 1, length(:prefix)) = :prefix
  AND (expires IS NULL OR expires > :now)
ORDER BY key;

-- name: meta_delete
-- In: :key. Out: one row, the expiry of the record deleted, when there was one.
DELETE FROM meta WHERE key = :key RETURNING expires;
