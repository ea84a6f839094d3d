"""Running the kit, the top layer: notebook runs and their recorded numbers (``run``), parameter checks
(``parameter_values``), sweeps (``sweep``), the whole reproduction (``reproduce``) and its results files
(``report``), measured tolerances (``expected``), the compute floor (``compute``) and the ``cfkit`` command
(``cli``). May import every other layer; nothing imports it."""
