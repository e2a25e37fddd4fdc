-- 0003_tallies: the per-minute history of each queue's outcomes (the dashboard's charts).
-- Workers add their counts every few seconds; the elected maintenance prunes old minutes.

CREATE TABLE relaymq_tallies (
    queue     text   NOT NULL,
    minute    bigint NOT NULL,
    completed bigint NOT NULL DEFAULT 0,
    retried   bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);

CREATE INDEX relaymq_tallies_minute ON relaymq_tallies (minute);
