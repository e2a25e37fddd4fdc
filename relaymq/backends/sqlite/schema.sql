-- relaymq SQLite schema, version 1.
--
-- In:  nothing (run as one script by SQLiteBackend.connect()).
-- Out: the tables, indexes and triggers below; PRAGMA user_version = 1.
--
-- Every statement is IF NOT EXISTS and the whole script is one BEGIN IMMEDIATE transaction,
-- so several processes opening a fresh file at the same moment are harmless. Nothing here
-- ever drops user data; a later version adds a migration instead of editing this file.

BEGIN IMMEDIATE;

-- One row per job. Times are seconds since the epoch (REAL), taken from the backend's clock.
-- Columns are loosely typed on purpose (no STRICT): the reader validates every row and turns an
-- unreadable one into CorruptRecordError (see records.py) instead of trusting the file.
CREATE TABLE IF NOT EXISTS jobs (
    queue            TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    state            TEXT    NOT NULL,   -- waiting delayed active completed failed expired cancelled
    priority         INTEGER NOT NULL DEFAULT 0,   -- lower number first
    seq              INTEGER NOT NULL,   -- per-queue FIFO position, from queues.seq
    created_at       REAL    NOT NULL,
    run_at           REAL,               -- delayed: when the job becomes eligible
    ttl              REAL,
    max_attempts     INTEGER NOT NULL DEFAULT 1,
    timeout          REAL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    token            INTEGER NOT NULL DEFAULT 0,   -- fencing token, +1 on every claim
    claimed_at       REAL,
    heartbeat_at     REAL,
    worker_id        TEXT,
    stalls           INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    progress         BLOB,
    result           BLOB,
    error            TEXT,
    finished_at      REAL,               -- set when the job reaches a terminal state
    PRIMARY KEY (queue, id)
);

-- claim and the waiting listing: the head of a queue's line, O(log n).
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, priority, seq) WHERE state = 'waiting';
-- delayed promotion (run_at <= now), the earliest due time for wait(), the delayed listing.
CREATE INDEX IF NOT EXISTS jobs_delayed ON jobs (queue, run_at, seq) WHERE state = 'delayed';
-- stall scan: active jobs by the newer of heartbeat_at and claimed_at.
CREATE INDEX IF NOT EXISTS jobs_active
    ON jobs (queue, max(heartbeat_at, claimed_at)) WHERE state = 'active';
-- terminal listings (oldest first) and clean(state, older_than).
CREATE INDEX IF NOT EXISTS jobs_finished
    ON jobs (queue, state, finished_at) WHERE finished_at IS NOT NULL;

-- Jobs per (queue, state), kept by the triggers below in the same transaction as the change
-- itself, so counts() reads a handful of rows and never scans jobs.
CREATE TABLE IF NOT EXISTS counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS jobs_count_insert AFTER INSERT ON jobs
BEGIN
    INSERT INTO counts (queue, state, n) VALUES (NEW.queue, NEW.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER IF NOT EXISTS jobs_count_update AFTER UPDATE OF state ON jobs
WHEN OLD.state IS NOT NEW.state
BEGIN
    UPDATE counts SET n = n - 1 WHERE queue = OLD.queue AND state = OLD.state;
    INSERT INTO counts (queue, state, n) VALUES (NEW.queue, NEW.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER IF NOT EXISTS jobs_count_delete AFTER DELETE ON jobs
BEGIN
    UPDATE counts SET n = n - 1 WHERE queue = OLD.queue AND state = OLD.state;
END;

-- The per-queue FIFO allocator: seq is the last sequence number handed out.
CREATE TABLE IF NOT EXISTS queues (
    queue TEXT    NOT NULL PRIMARY KEY,
    seq   INTEGER NOT NULL
) WITHOUT ROWID;

-- A row means: the queue is paused.
CREATE TABLE IF NOT EXISTS pauses (
    queue TEXT NOT NULL PRIMARY KEY
) WITHOUT ROWID;

-- Leases (maintenance election). A lease whose expires_at <= now is free.
CREATE TABLE IF NOT EXISTS locks (
    name       TEXT NOT NULL PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;

-- The worker registry. queues is a JSON array of names.
CREATE TABLE IF NOT EXISTS workers (
    id          TEXT    NOT NULL PRIMARY KEY,
    queues      TEXT    NOT NULL,
    concurrency INTEGER NOT NULL,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    seen_at     REAL    NOT NULL,
    expires_at  REAL    NOT NULL
) WITHOUT ROWID;

-- Published events, tailed by subscribers in every process. AUTOINCREMENT so that an id is
-- never reused after trimming (a subscriber remembers the last id it saw).
CREATE TABLE IF NOT EXISTS events (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    body BLOB NOT NULL
);

PRAGMA user_version = 1;

COMMIT;
