"""The papers livens reproduces, one module each (registered with
:func:`livens.studies.reproduce.register_paper`): mubo-2023 (KBS23a), nody-2023 (KBS23b),
livens-2023 (KB23), jns-2009 (SLO09)."""

from . import jns_2009, livens_2023, mubo_2023, nody_2023  # noqa: F401
