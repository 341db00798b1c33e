"""The objective: reward ln(speedup) + eps * ln(energy reduction), with eps small enough that a speed
difference outside the timing noise always dominates, and the final choice among tied candidates."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .measurement import PLACEMENT

ENERGY_RATIO_CLAMP = 4.0
"""Energy reductions are clamped to [1/4, 4] in the reward; see ``energy_eps``."""


def timing_noise(gamma: float, spreads: Sequence[float] = ()) -> float:
    """The factor below which two speedups are indistinguishable: the gate's gamma, or the measured
    timing spread (p90/p10 of the baseline) when that is wider."""
    finite = [x for x in spreads if math.isfinite(x) and x >= 1.0]
    return max([gamma, *finite])


def energy_eps(noise: float, clamp: float = ENERGY_RATIO_CLAMP) -> float:
    """eps such that energy can never outweigh a speed difference outside the noise.

    Two candidates' energy terms differ by at most eps * (ln clamp - ln(1/clamp)) = 2 eps ln clamp.
    Setting that equal to ln(noise) means a speedup ratio above the noise (ln s1 - ln s2 > ln noise)
    always wins, and energy decides only among speeds within the noise of each other. With the
    gate's gamma 1.03 and the clamp 4: eps = ln 1.03 / (2 ln 4) = 0.0107.
    """
    return math.log(noise) / (2.0 * math.log(clamp))


def energy_term(eps: float, reduction: float | None, clamp: float = ENERGY_RATIO_CLAMP) -> float:
    """eps * ln(clamped energy reduction); 0 without a reduction."""
    if reduction is None or not math.isfinite(reduction) or reduction <= 0:
        return 0.0
    return eps * math.log(min(max(reduction, 1.0 / clamp), clamp))


@dataclass(frozen=True)
class Choice:
    """The final choice among gate-passing candidates."""

    index: int
    """Index of the chosen one in the list given."""
    tied: tuple[int, ...]
    """Indices within the timing noise of the fastest."""
    reason: str
    """Why, in a sentence."""


def choose(speedups: Sequence[float], energies: Sequence[float | None], mode: str, noise: float) -> Choice:
    """Speed first. In active mode, among candidates whose speedup is within ``noise`` of the
    fastest, the one with the least energy per call wins if it beats the fastest's by more than
    PLACEMENT (unmeasured energy never wins a tie); off and passive keep the fastest."""
    if not speedups:
        raise ValueError("choose() needs at least one candidate")
    fastest = max(range(len(speedups)), key=lambda i: speedups[i])
    tied = tuple(i for i, sp in enumerate(speedups) if sp * noise >= speedups[fastest])
    if mode != "active" or len(tied) < 2:
        return Choice(fastest, tied, "fastest" if len(tied) < 2 else f"fastest ({mode} mode: energy does not choose)")
    measured = [i for i in tied if energies[i] is not None and math.isfinite(energies[i] or math.nan)]
    if not measured:
        return Choice(fastest, tied, "fastest (no energy measured for the tied candidates)")
    best = min(measured, key=lambda i: energies[i] or 0.0)
    if best == fastest:
        return Choice(best, tied, f"fastest, and the least energy of {len(tied)} within the timing noise")
    if fastest in measured and (energies[best] or 0.0) > (energies[fastest] or 0.0) * (1 - PLACEMENT):
        return Choice(fastest, tied, f"fastest: no candidate within the timing noise used less energy by more than "
                                     f"{PLACEMENT:.1%}, which one kernel in two processes differs by")
    return Choice(best, tied, f"least energy of {len(tied)} candidates within the timing noise ({noise:.3f}x) "
                              "of the fastest")


