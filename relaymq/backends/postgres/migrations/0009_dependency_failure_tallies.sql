-- 0009_dependency_failure_tallies: a job failed by its dependency (blocked -> failed, which
-- only relaymq_dependencies_ended writes, inside the statement that ended the dependency)
-- counts in the history's failed, at the minute of its failure, in the same transaction. A
-- worker counts only the outcomes it writes itself, so the dashboard's chart missed these.
-- The row trigger's WHEN is checked per updated row; its function runs only for those jobs.

CREATE FUNCTION relaymq_dependency_failed_tally() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO relaymq_tallies AS t (queue, minute, failed)
    VALUES (NEW.queue, floor(extract(epoch FROM NEW.finished_at) / 60)::bigint, 1)
    ON CONFLICT (queue, minute) DO UPDATE SET failed = t.failed + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER relaymq_jobs_dependency_failed AFTER UPDATE OF state ON relaymq_jobs
    FOR EACH ROW WHEN (OLD.state = 'blocked' AND NEW.state = 'failed')
    EXECUTE FUNCTION relaymq_dependency_failed_tally();
