"""Integer helpers: prime factorisation, divisors, odd parts, the distinct values of an array.

Trial division, so meant for the sizes this package meets (device counts, batch sizes, at most
about 2**40); the cost grows with the square root of the largest prime factor.
"""

from __future__ import annotations

import operator

import numpy as np


def prime_factors(n: int) -> dict[int, int]:
    """{prime: exponent} with product n, primes ascending; prime_factors(1) == {}."""
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"prime_factors: n must be >= 1, got {n}")
    factors: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
        p += 1 if p == 2 else 2
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors


def divisors(n: int) -> list[int]:
    """Every positive divisor of n, ascending, built from the prime factorisation."""
    result = [1]
    for p, exponent in prime_factors(n).items():
        result = [d * p**k for d in result for k in range(exponent + 1)]
    return sorted(result)


def odd_part(n: int) -> int:
    """``n`` without its factors of 2 (576 -> 9); n >= 1."""
    return n // (n & -n)


def distinct(values) -> np.ndarray:
    """The sorted distinct values of an array: ``np.unique``'s, asked with counts so that numpy
    skips its masked-array check, whose first use imports ``numpy.ma`` (tens of ms of a solve)."""
    return np.unique(values, return_counts=True)[0]
