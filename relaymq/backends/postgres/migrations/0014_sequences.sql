-- 0014_sequences: sequences (relaymq.job.NewJob.sequence): the jobs of one sequence of a
-- queue run one at a time, in enqueue order. A job's sequence, its place in enqueue order
-- (sequence_pos: its seq when it was enqueued, never changed after; a retried job keeps it),
-- what it does to the sequence when dead-lettered (seq_failure: 'hold' or 'continue'), and
-- the index a claim reads them by (queries.sql, fragment sequence_free): the jobs of
-- sequences that may hold one, by enqueue order. Rows stored before have no sequence, so the
-- index starts empty.

ALTER TABLE relaymq_jobs ADD COLUMN sequence text;
ALTER TABLE relaymq_jobs ADD COLUMN sequence_pos bigint;
ALTER TABLE relaymq_jobs ADD COLUMN seq_failure text;
CREATE INDEX relaymq_jobs_sequence ON relaymq_jobs (queue, sequence, sequence_pos)
    WHERE sequence IS NOT NULL AND state IN ('waiting', 'delayed', 'active', 'failed', 'expired');
