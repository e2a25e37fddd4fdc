-- 0002_traceparent: the W3C trace context of the enqueue that made a job (relaymq.tracing).
-- NULL unless tracing was on at enqueue; adding a nullable column without a default rewrites
-- nothing, so this is instant on a table of any size.

ALTER TABLE relaymq_jobs ADD COLUMN traceparent text;
