"""The papers livens reproduces, one module each (registered with
:func:`livens.studies.reproduce.register_paper`): mubo-2023 (000), nody-2023 (002),
livens-2023 (003), jns-2009 (004)."""
from . import jns_2009, livens_2023, mubo_2023, nody_2023  # noqa: F401
