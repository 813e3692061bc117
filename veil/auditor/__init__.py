"""Security team: attacks and measurements against releases."""
