-- 0010_worker_refused: the queues a worker's backend refuses as configured, on its
-- registration (relaymq.worker.refusals): a JSON array of [queue, error] pairs, empty while
-- the worker serves every queue it was started on.

ALTER TABLE relaymq_workers ADD COLUMN refused jsonb NOT NULL DEFAULT '[]';
