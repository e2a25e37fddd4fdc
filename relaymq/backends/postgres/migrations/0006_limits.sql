-- 0006_limits: queue limits (relaymq.limits): a cap on active jobs, a rate of starts per
-- window of `per` seconds, and the current window (its index) with the starts counted in it.
-- A limited queue's claims lock its row, so they take turns; other queues never read it but
-- for an index probe.

CREATE TABLE relaymq_limits (
    queue      text             PRIMARY KEY,
    max_active integer,
    rate       integer,
    per        double precision NOT NULL,
    win        bigint           NOT NULL DEFAULT 0,
    used       integer          NOT NULL DEFAULT 0
);
