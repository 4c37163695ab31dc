"""The works livens implements and cites, by the keys its docstrings, messages and reports use
(``[KBS23b] eq 55`` or ``KBS23b eq 55``: equation 55 of Kinon, Betsch, Schneider 2023, Nonlinear
Dynamics). :data:`REFERENCES` maps each key to its full reference; :func:`cite` gives one."""

from __future__ import annotations

REFERENCES = {
    "KBS23a": "P. L. Kinon, P. Betsch, S. Schneider: The GGL variational principle for constrained mechanical "
    "systems. Multibody System Dynamics 57 (2023).",
    "KBS23b": "P. L. Kinon, P. Betsch, S. Schneider: Structure-preserving integrators based on a new variational "
    "principle for constrained mechanical systems. Nonlinear Dynamics (2023).",
    "KB23": "P. L. Kinon, P. Betsch: Energy-consistent integration of mechanical systems based on Livens principle "
    "(conference paper).",
    "SLO09": "B. Schmidt, S. Leyendecker, M. Ortiz: Γ-convergence of variational integrators for constrained "
    "systems. Journal of Nonlinear Science 19 (2009).",
    "WOL17": "T. Wenger, S. Ober-Blöbaum, S. Leyendecker: Construction and analysis of higher order variational "
    "integrators for dynamical systems with holonomic constraints. Advances in Computational Mathematics 43 (2017).",
    "Kin21": "P. L. Kinon: the GGL variational principle and its integrators, master thesis poster, Karlsruhe "
    "Institute of Technology (2021).",
    "Gon99": "O. Gonzalez: Mechanical systems subject to holonomic constraints: differential-algebraic formulations "
    "and conservative integration. Physica D 132 (1999).",
    "And83": 'H. C. Andersen: Rattle: a "velocity" version of the Shake algorithm for molecular dynamics '
    "calculations. Journal of Computational Physics 52 (1983).",
    "HLW06": "E. Hairer, C. Lubich, G. Wanner: Geometric Numerical Integration, 2nd ed. Springer (2006).",
    "Jay07": "L. O. Jay: Specialized partitioned additive Runge-Kutta methods for systems of overdetermined DAEs "
    "with holonomic constraints. SIAM Journal on Numerical Analysis 45 (2007).",
    "HW96": "E. Hairer, G. Wanner: Solving Ordinary Differential Equations II: Stiff and Differential-Algebraic "
    "Problems, 2nd ed. Springer (1996).",
    "MM08": "F. Mazzia, C. Magherini: Test Set for Initial Value Problem Solvers, release 2.4. Department of "
    "Mathematics, University of Bari (2008).",
    "BS99": "A. I. Bobenko, Yu. B. Suris: Discrete time Lagrangian mechanics on Lie groups, with an application to "
    "the Lagrange top. Communications in Mathematical Physics 204 (1999).",
    "BS02": "P. Betsch, P. Steinmann: Frame-indifferent beam finite elements based upon the geometrically exact "
    "beam theory. International Journal for Numerical Methods in Engineering 54 (2002).",
    "BS02b": "P. Betsch, P. Steinmann: Conservation properties of a time FE method. Part III: Mechanical systems "
    "with holonomic constraints. International Journal for Numerical Methods in Engineering 53 (2002).",
    "Ben03": "G. T. Bennett: A new mechanism. Engineering 76 (1903) 777-778.",
    "Bak79": "J. E. Baker: The Bennett, Goldberg and Myard linkages - in perspective. Mechanism and Machine Theory "
    "14 (1979) 239-253.",
    "McC90": "J. M. McCarthy: An Introduction to Theoretical Kinematics. MIT Press (1990).",
}
"""Key -> full reference."""


def cite(key: str) -> str:
    """The full reference of ``key`` (a KeyError names the known keys)."""
    try:
        return REFERENCES[key]
    except KeyError:
        raise KeyError(f"unknown reference key {key!r}; known: {', '.join(REFERENCES)}") from None


__all__ = ["REFERENCES", "cite"]
