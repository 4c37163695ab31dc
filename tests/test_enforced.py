"""The constraints a scheme is built to meet are data (livens.schemes.enforced): every scheme names
them as Enforced entries, a wrong entry is refused with the values it takes, and the names say where
each residual is evaluated."""

import pytest

from livens import schemes
from livens.schemes.base import BOTH_NODAL, POSITION, Enforced


def test_every_scheme_names_what_it_enforces_as_data():
    for name in schemes.names():
        sch, _ = schemes.get(name)
        entries = sch.about.enforced
        assert isinstance(entries, tuple) and entries, name
        assert all(isinstance(e, Enforced) for e in entries), name
        assert entries[0].level == "position", name


@pytest.mark.parametrize(
    "kw, words",
    [({"level": "acceleration"}, "'position' or 'velocity'"), ({"level": "position", "at": "mid"}, "node, bar, theta")],
)
def test_a_wrong_entry_is_refused_with_the_values_it_takes(kw, words):
    with pytest.raises(ValueError, match=words):
        Enforced(**kw)
    with pytest.raises(ValueError, match="M\\^-1 p, M\\(q\\)\\^-1 p, v"):
        Enforced("velocity", w="p")


def test_the_names_say_where_and_with_which_velocity():
    assert [e.name(True) for e in POSITION] == ["position g(q^{n+1})"]
    assert [e.name(True) for e in BOTH_NODAL] == ["position g(q^{n+1})", "velocity G(q^{n+1}) M^-1 p^{n+1}"]
    assert BOTH_NODAL[1].name(False) == "velocity G(q^{n+1}) M(q^{n+1})^-1 p^{n+1}"
    assert Enforced("velocity", at="bar").name(False) == "velocity G(q_bar) M(q_bar)^-1 p^{n+1}"
    assert Enforced("velocity", at="theta", w="v").name(True) == "velocity G(q^{n+theta}) v^{n+1}"
    assert Enforced("velocity", w="M(q)^-1 p").name(True) == "velocity G(q^{n+1}) M(q^{n+1})^-1 p^{n+1}"
