"""From counterfactual sets to the results table: per-image metrics (``metrics``), the table's columns declared
once (``columns``), bootstrap intervals and paired tests (``bootstrap``), one pair's set scored into a row
(``pairs``), the protocol's queries and the scoring of saved sets (``evaluation``), sets on disk (``store``),
``results/table.*`` (``table``) and the figures (``plots``). May import ``errors``, ``paths``, ``common``,
``data``, ``zoo`` and ``methods``, never the layers above."""
