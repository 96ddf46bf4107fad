"""Prime factorisation and divisors."""

import math

import pytest

from layoutsearch.core.numbers import divisors, prime_factors


def brute_divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def test_divisors_of_one_and_primes():
    assert divisors(1) == [1]
    assert divisors(2) == [1, 2]
    assert divisors(97) == [1, 97]
    assert divisors(2**31 - 1) == [1, 2**31 - 1]  # a Mersenne prime


def test_divisor_counts_of_cluster_sized_numbers():
    assert len(divisors(8192)) == 14  # 2^13
    assert divisors(8192) == [2**k for k in range(14)]
    assert len(divisors(8960)) == 36  # 2^8 x 5 x 7: 9 x 2 x 2
    assert len(divisors(100_000_000)) == 81  # 2^8 x 5^8
    assert len(divisors(262_144)) == 19  # 2^18


@pytest.mark.parametrize("n", list(range(1, 400)) + [720, 8960, 9216, 65_536, 99_991])
def test_divisors_match_brute_force(n):
    assert divisors(n) == brute_divisors(n)


def test_prime_factors():
    assert prime_factors(1) == {}
    assert prime_factors(2) == {2: 1}
    assert prime_factors(8960) == {2: 8, 5: 1, 7: 1}
    assert prime_factors(9216) == {2: 10, 3: 2}
    assert prime_factors(100_000_000) == {2: 8, 5: 8}
    assert prime_factors(2 * 1_000_003) == {2: 1, 1_000_003: 1}
    big = 2**40 - 87  # largest prime below 2^40
    assert prime_factors(big) == {big: 1}


@pytest.mark.parametrize("n", [2, 12, 360, 8191, 8960, 2**40])
def test_prime_factors_multiply_back(n):
    factors = prime_factors(n)
    assert math.prod(p**e for p, e in factors.items()) == n
    assert list(factors) == sorted(factors)
    assert all(len(divisors(p)) == 2 for p in factors)


@pytest.mark.parametrize("bad", [0, -1, -8192])
def test_non_positive_is_a_value_error(bad):
    with pytest.raises(ValueError, match=f"n must be >= 1, got {bad}"):
        divisors(bad)
    with pytest.raises(ValueError, match=f"n must be >= 1, got {bad}"):
        prime_factors(bad)
