"""Helpers every layer shares: input checks (``validate``), devices (``devices``), inference batch sizes
(``batching``), torch thread shares (``threads``), timed phases (``profiling``), training precision
(``precision``) and weight fingerprints (``fingerprint``). May import only ``cfkit.errors`` and ``cfkit.paths``."""
