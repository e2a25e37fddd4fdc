-- 0007_dependencies: jobs that wait for other jobs of their queue (depends_on). A blocked job
-- keeps how many of its dependencies have not ended; relaymq_job_deps lists, per dependency,
-- the jobs blocked on it. The statement triggers below tell them when a dependency ends (or is
-- deleted before it ended), in the same statement's transaction; a dependent they fail ends
-- in turn, which fires them again, down the chain. Statements that end no job with dependents
-- pay one probe of relaymq_job_deps per row they end.

ALTER TABLE relaymq_jobs DROP CONSTRAINT IF EXISTS relaymq_jobs_state_check;
ALTER TABLE relaymq_jobs ADD CONSTRAINT relaymq_jobs_state_check CHECK (state IN ('blocked',
    'waiting', 'delayed', 'active', 'completed', 'failed', 'expired', 'cancelled'));
ALTER TABLE relaymq_jobs ADD COLUMN depends_on text[];
ALTER TABLE relaymq_jobs ADD COLUMN dep_policy text;
ALTER TABLE relaymq_jobs ADD COLUMN pending_deps integer;
CREATE INDEX relaymq_jobs_blocked ON relaymq_jobs (queue, seq) WHERE state = 'blocked';

CREATE TABLE relaymq_job_deps (
    queue     text NOT NULL,
    dep_id    text NOT NULL,
    dependent text NOT NULL,
    PRIMARY KEY (queue, dep_id, dependent)
);

-- mirrors relaymq.policy.dependency_ended
-- The dependencies (queue[i], id[i]) ended in state[i] ('removed': deleted before they
-- ended), at `at`. Each dependent counts those that ended (several may end in one statement);
-- the first that did not complete fails it under the 'fail' policy; the last makes it delayed,
-- due at once. A dependent updated meanwhile by a concurrent statement is read again under
-- its row lock, so no end is counted twice or lost.
CREATE FUNCTION relaymq_dependencies_ended(q text[], dep text[], dep_state text[],
                                           at timestamptz) RETURNS void LANGUAGE sql
    SET search_path FROM CURRENT AS $$
    WITH gone AS (
        DELETE FROM relaymq_job_deps d USING unnest(q, dep, dep_state) AS e(queue, id, state)
        WHERE d.queue = e.queue AND d.dep_id = e.id
        RETURNING d.queue, d.dependent, d.dep_id, e.state
    ),
    per AS (
        SELECT g.queue, g.dependent, count(*) AS n,
               (array_agg('dependency ' || g.dep_id || ' ended ' || g.state ORDER BY g.dep_id)
                    FILTER (WHERE g.state <> 'completed'))[1] AS bad
        FROM gone g GROUP BY g.queue, g.dependent
    )
    UPDATE relaymq_jobs j SET
        state = CASE WHEN p.bad IS NOT NULL AND j.dep_policy = 'fail' THEN 'failed'
                     WHEN j.pending_deps - p.n <= 0 THEN 'delayed' ELSE 'blocked' END,
        pending_deps = j.pending_deps - p.n,
        error = CASE WHEN p.bad IS NOT NULL AND j.dep_policy = 'fail' THEN p.bad
                     ELSE j.error END,
        finished_at = CASE WHEN p.bad IS NOT NULL AND j.dep_policy = 'fail' THEN at
                           ELSE j.finished_at END,
        run_at = CASE WHEN p.bad IS NOT NULL AND j.dep_policy = 'fail' THEN j.run_at
                      WHEN j.pending_deps - p.n <= 0 THEN at ELSE j.run_at END
    FROM per p
    WHERE j.queue = p.queue AND j.id = p.dependent AND j.state = 'blocked';
$$;

CREATE FUNCTION relaymq_jobs_deps_updated() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows n JOIN relaymq_job_deps d
               ON d.queue = n.queue AND d.dep_id = n.id
               WHERE n.state IN ('completed', 'failed', 'expired', 'cancelled')) THEN
        PERFORM relaymq_dependencies_ended(array_agg(n.queue), array_agg(n.id),
                                           array_agg(n.state), coalesce(max(n.finished_at), now()))
        FROM new_rows n WHERE n.state IN ('completed', 'failed', 'expired', 'cancelled');
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION relaymq_jobs_deps_deleted() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM old_rows o JOIN relaymq_job_deps d
               ON d.queue = o.queue AND d.dep_id = o.id
               WHERE o.state IN ('blocked', 'waiting', 'delayed', 'active')) THEN
        PERFORM relaymq_dependencies_ended(array_agg(o.queue), array_agg(o.id),
                                           array_agg('removed'::text), now())
        FROM old_rows o WHERE o.state IN ('blocked', 'waiting', 'delayed', 'active');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER relaymq_jobs_deps_updated AFTER UPDATE ON relaymq_jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION relaymq_jobs_deps_updated();
CREATE TRIGGER relaymq_jobs_deps_deleted AFTER DELETE ON relaymq_jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION relaymq_jobs_deps_deleted();
