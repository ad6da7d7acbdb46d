"""Kopf admission handlers of kai-py (mutating and validating webhooks)."""
