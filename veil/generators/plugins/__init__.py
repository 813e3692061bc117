"""The built-in publication plug-ins (see :mod:`veil.generators.registry`)."""
