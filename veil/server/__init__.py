"""``veil serve``: the PostgreSQL wire protocol in front of the analyst query path."""
