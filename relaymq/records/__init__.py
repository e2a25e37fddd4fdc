"""Records: the plain values that cross the seams (``store``: enqueue, claim, settle and
their answers; ``limits``; ``events``: the event format). They import nothing of relaymq but
other records and ``relaymq.errors``; the job itself is ``relaymq.job``."""
