"""The writes: a cycle's decisions turned into API calls.

``writer.plan`` turns the Decisions of one cycle into an ordered list of writes
(BindRequests and evictions first, then PodGroup and Queue status, pod conditions
and Events) that skips what the cluster already shows, and ``Writer`` /
``BackgroundWriter`` send them with uid preconditions so a decision about an object
that has since been replaced is never applied to the new one.
"""
