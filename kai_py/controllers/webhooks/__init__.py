"""Kopf admission webhooks of kai-py (``kai-py run --controllers webhooks``)."""
