"""What counts as one of a user's facts: one definition for every list and count of them.

A fact is a live ``fact`` or ``preference`` memory: saved through Navi's facts
API (with a category and key) or learned by the extractor (no key). ``GET
/v1/facts`` lists exactly these rows and the narrative summary's ``fact_count``
counts them, so the two can never disagree.
"""

from __future__ import annotations

LIVE_FACT = """type IN ('fact', 'preference') AND status = 'active' AND superseded_at IS NULL
    AND (expires_at IS NULL OR expires_at > now())"""
