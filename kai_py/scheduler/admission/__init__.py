"""Queue admission: which pods held by kai-py's queue-admission scheduling gate may be
let go this cycle (their job fits within its queue's quota and limit), decided on the
session's state after the actions ran (``ungate``); pure, as the rest of the scheduler."""
