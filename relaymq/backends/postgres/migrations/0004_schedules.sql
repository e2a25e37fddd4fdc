-- 0004_schedules: stored schedules (relaymq.schedules). The spec is opaque to the backend;
-- next_ms (the next tick, milliseconds since the epoch) and paused are the state every
-- scheduler process shares.

CREATE TABLE relaymq_schedules (
    id      text    PRIMARY KEY,
    spec    bytea   NOT NULL,
    next_ms bigint  NOT NULL,
    paused  boolean NOT NULL DEFAULT false
);
