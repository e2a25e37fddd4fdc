-- 0012_attempt_history: each job's attempt history, written by the settle statements in the
-- same step as the outcome: a JSON array of relaymq.job.Attempt records, oldest first (NULL:
-- none yet); and the one rule that adds an attempt to it (relaymq.records.store.with_attempt).

ALTER TABLE relaymq_jobs ADD COLUMN attempt_history jsonb;

-- history with attempt added, the last keep of them (keep <= 0: history unchanged). A history
-- that is not an array starts afresh rather than stopping the settle.
CREATE FUNCTION relaymq_with_attempt(history jsonb, attempt jsonb, keep integer)
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN keep <= 0 THEN history
        WHEN history IS NULL OR jsonb_typeof(history) <> 'array' THEN jsonb_build_array(attempt)
        WHEN jsonb_array_length(history) < keep THEN history || jsonb_build_array(attempt)
        ELSE (SELECT jsonb_agg(x.e ORDER BY x.i)
              FROM jsonb_array_elements(history || jsonb_build_array(attempt))
                  WITH ORDINALITY AS x(e, i)
              WHERE x.i > jsonb_array_length(history) + 1 - keep)
    END
$$;

-- The history per task, with durations: run times and pickup latencies counted per bucket of
-- relaymq.records.store.TIME_BUCKETS. relaymq_tallies keeps the counts per queue only (jobs
-- failed by a dependency, counted by the trigger of 0009).
CREATE TABLE relaymq_task_tallies (
    queue     text     NOT NULL,
    task      text     NOT NULL,
    minute    bigint   NOT NULL,
    completed bigint   NOT NULL DEFAULT 0,
    retried   bigint   NOT NULL DEFAULT 0,
    failed    bigint   NOT NULL DEFAULT 0,
    run_times bigint[] NOT NULL DEFAULT '{}',
    pickups   bigint[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (queue, minute, task)
);

CREATE INDEX relaymq_task_tallies_minute ON relaymq_task_tallies (minute);

-- a and b added element by element (the shorter one counts as zeros past its end).
CREATE FUNCTION relaymq_add_counts(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS u(x, y, i)
$$;
