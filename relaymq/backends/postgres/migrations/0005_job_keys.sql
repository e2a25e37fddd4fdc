-- 0005_job_keys: the throttle and debounce keys of each queue. A key names the job holding it,
-- and until when a throttle window holds it whatever that job's state.

CREATE TABLE relaymq_job_keys (
    queue  text        NOT NULL,
    key    text        NOT NULL,
    job_id text        NOT NULL,
    until  timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);
