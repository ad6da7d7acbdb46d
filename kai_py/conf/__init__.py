"""Configuration: the scheduler configuration file in KAI's shape (``--config``),
read into the scheduler's ``Config`` with a warning for every key kai-py reads but
does not apply. Used by the operator and by ``kai-py simulate``.
"""
