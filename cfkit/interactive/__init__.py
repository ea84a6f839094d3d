"""What a person looks at or draws on: the notebooks' explorer (``widgets``), mouse strokes made into a digit
(``drawing``), the live explorer app (``app``), the static gallery (``gallery``) and the local Jupyter servers
(``servers``). May import ``errors``, ``paths``, ``common``, ``data``, ``zoo``, ``methods``, ``scoring`` and
``studies``, never ``running``."""
