"""The limits on a job's fields, for every room that checks them: declarations (`define_job`'s
tags), the stores (validate), the transports (a message's idempotency key). A leaf: it imports
nothing, so a declaration or a sender may know the limits without knowing a store."""

from __future__ import annotations

MAX_TAGS, MAX_TAG_LENGTH = 32, 100  # per job; characters per tag
MAX_NAME_LENGTH = 200  # characters of a job's, queue's or worker's name
MAX_KEY_LENGTH = 500  # characters of a unique key, an idempotency key, a schedule id
MAX_PAYLOAD_BYTES = 1_048_576  # a job's encoded input
MAX_RESULT_BYTES = 65_536  # a job's encoded result (a larger one goes to ctx.storage)
MAX_STEP_BYTES = 65_536  # the encoded value of one of a job's durable steps
MAX_PROGRESS_BYTES = 1_024  # what a handler last reported with ctx.progress, encoded
MAX_PROGRESS_NOTE = 200  # characters of its note (a longer one is cut)
