"""satmodel: the pandas-free CP-SAT layer agrees with ortools' cp_model and decodes solutions."""

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ortools.sat.python import cp_model

from layoutsearch.search import satmodel as sm

MODULE_FILE = Path(sm.__file__).resolve()


def _solver(mod, seed: int = 7):
    solver = mod.CpSolver()
    # no max_time_in_seconds: OR-Tools' default is no limit, so a verdict never depends on speed
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.symmetry_level = 0
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.linearization_level = 2
    return solver


def _assignment(mod, seed: int):
    """Items into bins or skipped: loads as int vars, enforced open/closed bins, conflicts as
    bool_or, one item forced in by an assumption; the same API calls for either module."""
    rng = random.Random(seed)
    items, bins = 9, 3
    weight = [rng.randint(1, 9) for _ in range(items)]
    value = [np.int64(rng.randint(1, 20)) for _ in range(items)]
    cap = [rng.randint(6, 16) for _ in range(bins)]
    model = mod.CpModel()
    x = {(i, b): model.new_bool_var(f"x{i}_{b}") for i in range(items) for b in range(bins)}
    skip = [model.new_bool_var(f"skip{i}") for i in range(items)]
    opened = [model.new_bool_var(f"open{b}") for b in range(bins)]
    load = [model.new_int_var(0, cap[b], f"load{b}") for b in range(bins)]
    for i in range(items):
        model.add_exactly_one([x[i, b] for b in range(bins)] + [skip[i]])
    for b in range(bins):
        model.add(load[b] == sum(weight[i] * x[i, b] for i in range(items)))
        model.add(load[b] == 0).only_enforce_if(~opened[b])
        model.add(load[b] >= rng.randint(1, 5)).only_enforce_if(opened[b])
        model.add(load[b] - cap[b] + 1 <= 0 + opened[b])  # subtraction, constants on both sides
    for _ in range(6):
        i, j, b = rng.randrange(items), rng.randrange(items), rng.randrange(bins)
        if i != j:
            model.add_bool_or([~x[i, b], ~x[j, b]])
    model.add(load[0] >= load[1]).only_enforce_if(opened[1], ~skip[0])
    model.add_assumptions([~skip[rng.randrange(items)]])
    cost = sum(rng.randint(3, 12) * o for o in opened)
    model.minimize(cost - sum(value[i] * x[i, b] for i in range(items) for b in range(bins)) + 100)
    return model, x, skip, opened, load


def test_same_optimum_as_cp_model_on_random_instances():
    """20 seeded assignment instances: same status and optimal objective as cp_model."""
    optima = []
    for seed in range(20):
        statuses, objectives = [], []
        for mod in (cp_model, sm):
            model = _assignment(mod, seed)[0]
            solver = _solver(mod)
            status = solver.solve(model)
            statuses.append(int(status))
            objectives.append(solver.objective_value if status == mod.OPTIMAL else None)
        assert statuses[0] == statuses[1], seed
        assert statuses[1] in (int(sm.OPTIMAL), int(sm.INFEASIBLE)), seed
        assert objectives[0] == objectives[1], seed
        optima.append(objectives[1])
    assert sum(o is not None for o in optima) >= 15  # most instances are feasible
    assert len({o for o in optima if o is not None}) > 5  # and the instances differ


def test_solution_satisfies_the_model():
    """The decoded assignment respects capacities, exactly-one and the objective value."""
    model, x, skip, opened, load = _assignment(sm, 3)
    solver = _solver(sm)
    assert solver.solve(model) == sm.OPTIMAL
    for i in range(9):
        assert (
            sum(solver.boolean_value(x[i, b]) for b in range(3)) + solver.boolean_value(skip[i])
            == 1
        )
    for b in range(3):
        assert solver.value(load[b]) <= model.proto.variables[load[b].index].domain[1]
        assert (solver.value(load[b]) > 0) == solver.boolean_value(opened[b])
    assert solver.best_objective_bound == solver.objective_value
    assert solver.wall_time > 0


def test_infeasible_and_invalid_statuses():
    """Contradictory constraints give INFEASIBLE; an empty domain gives MODEL_INVALID."""
    model = sm.CpModel()
    a, b = model.new_bool_var("a"), model.new_bool_var("b")
    model.add(a + b >= 3)
    assert _solver(sm).solve(model) == sm.INFEASIBLE

    model = sm.CpModel()
    a = model.new_bool_var("a")
    model.add(a == 1).only_enforce_if(a)
    model.add_bool_or([~a])
    model.add_assumptions([a])
    assert _solver(sm).solve(model) == sm.INFEASIBLE
    model.clear_assumptions()
    assert _solver(sm).solve(model) == sm.OPTIMAL

    model = sm.CpModel()
    model.new_int_var(5, 1, "empty")
    assert model.validate() != ""
    assert _solver(sm).solve(model) == sm.MODEL_INVALID


def test_status_constants_match_cp_model():
    """OPTIMAL, FEASIBLE, INFEASIBLE, MODEL_INVALID, UNKNOWN equal cp_model's (usable as dict keys)."""
    names = ("OPTIMAL", "FEASIBLE", "INFEASIBLE", "MODEL_INVALID", "UNKNOWN")
    assert (
        [int(getattr(sm, n)) for n in names]
        == [int(getattr(cp_model, n)) for n in names]
        == [4, 2, 3, 1, 0]
    )
    table = {getattr(cp_model, n): n for n in names}
    assert [table[getattr(sm, n)] for n in names] == list(names)


def _import_check(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_module_import_does_not_load_pandas():
    """Loading satmodel.py in a fresh interpreter leaves pandas (and cp_model) out of sys.modules."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('satmodel', {str(MODULE_FILE)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print('pandas' in sys.modules, 'ortools.sat.python.cp_model' in sys.modules)\n"
    )
    assert _import_check(code) == "False False"


def test_package_import_does_not_load_pandas():
    """``import layoutsearch.search.satmodel`` stays pandas-free once the package no longer needs cp_model."""
    if _import_check("import sys, layoutsearch.search; print('pandas' in sys.modules)") == "True":
        pytest.skip("layoutsearch/search/__init__.py still imports cp_model (through cpsat.py)")
    assert (
        _import_check("import sys, layoutsearch.search.satmodel; print('pandas' in sys.modules)")
        == "False"
    )


def test_values_of_expressions_and_literals():
    """value() and boolean_value() decode ints, negated literals, constants and numpy coefficients."""
    model = sm.CpModel()
    p, q = model.new_bool_var("p"), model.new_bool_var("q")
    n = model.new_int_var(-5, 40, "n")
    model.add(p == 1)
    model.add(q == 0)
    model.add(n == 17)
    model.minimize(n)
    solver = _solver(sm)
    assert solver.solve(model) == sm.OPTIMAL
    assert (solver.value(n), solver.value(p), solver.value(q)) == (17, 1, 0)
    assert solver.boolean_value(p) is True and solver.boolean_value(q) is False
    assert solver.boolean_value(~p) is False and solver.boolean_value(~q) is True
    assert solver.value(np.int64(3) * n - 2 * p + q + 5) == 54
    assert solver.value(10 - n) == -7
    assert solver.value(~q + ~p) == 1  # ~v counts as 1 - v in expressions
    assert solver.value(sm.LinearExpr.weighted_sum([n, p, 4], [2, 3, 5])) == 57
    assert solver.value(-n) == -17 and solver.value(42) == 42
    assert solver.objective_value == 17.0
    assert solver.status_name() == "OPTIMAL"


def test_solution_callback_records_improving_solutions():
    """The callback sees objective_value and value(); its last objective is the optimum."""

    class Record(sm.CpSolverSolutionCallback):
        def __init__(self, var):
            super().__init__()
            self.var, self.seen = var, []

        def on_solution_callback(self):
            self.seen.append(
                (self.objective_value, self.value(self.var), self.boolean_value(~flag))
            )

    model, *_ = _assignment(sm, 5)
    flag = model.new_bool_var("flag")
    total = model.new_int_var(-10_000, 10_000, "total")
    model.add(flag == 1)
    record = Record(total)
    objective = sm.LinearExpr.sum([total, 0])
    model.add(total <= 60)
    model.add(total >= 7)
    model.minimize(objective)
    solver = _solver(sm)
    assert solver.solve(model, record) == sm.OPTIMAL
    assert record.seen and record.seen[-1] == (7.0, 7, False)
    assert [s[0] for s in record.seen] == sorted((s[0] for s in record.seen), reverse=True)


def test_minimize_replaces_objective_and_assumptions_clear():
    """Re-solving after minimize() uses the new objective; assumptions restrict until cleared."""
    model = sm.CpModel()
    xs = [model.new_bool_var(f"x{i}") for i in range(5)]
    n = model.new_int_var(0, 100, "n")
    model.add(n == sum((i + 1) * x for i, x in enumerate(xs)))
    model.add(sum(xs) >= 2)
    model.minimize(n)
    assert _solver(sm).solve(model) == sm.OPTIMAL
    solver = _solver(sm)
    solver.solve(model)
    assert solver.objective_value == 3.0  # x0 + x1
    model.minimize(-n + 1)
    solver.solve(model)
    assert solver.objective_value == -14.0 and solver.value(n) == 15
    model.add_assumptions([~xs[4], ~xs[3]])
    solver.solve(model)
    assert solver.objective_value == -5.0 and not solver.boolean_value(xs[4])
    model.clear_assumptions()
    assert len(model.proto.assumptions) == 0
    solver.solve(model)
    assert solver.objective_value == -14.0
    model.minimize(n)
    model.add_assumptions([xs[4]])
    solver.solve(model)
    assert solver.objective_value == 6.0  # x4 + x0


def test_truth_values_and_type_errors():
    """Only ==/!= between expressions has a truth value (identity); bad operands raise TypeError."""
    model = sm.CpModel()
    a, b = model.new_bool_var("a"), model.new_bool_var("b")
    n = model.new_int_var(0, 3, "n")
    assert a in [b, a] and [b, a].index(a) == 1
    assert bool(a == a) and not bool(a == b) and bool(a != b)
    with pytest.raises(TypeError):
        bool(a <= 1)
    with pytest.raises(TypeError):
        _ = a * b
    with pytest.raises(TypeError):
        _ = 2.5 * a
    with pytest.raises(TypeError):
        _ = ~n
    with pytest.raises(TypeError):
        model.add_bool_or([a, n])
    assert (~~a) is a and (~a) is (~a) and {a: 1, b: 2}[a] == 1


def test_constant_constraints():
    """add(True) is a no-op, add(False) enforced by a literal forces that literal false."""
    model = sm.CpModel()
    a, b = model.new_bool_var("a"), model.new_bool_var("b")
    model.add(sum([]) == 0).only_enforce_if(a)  # 0 == 0: True
    model.add(np.int64(0) == 1).only_enforce_if(b)  # numpy False
    model.minimize(-a - b)
    solver = _solver(sm)
    assert solver.solve(model) == sm.OPTIMAL
    assert (solver.boolean_value(a), solver.boolean_value(b)) == (True, False)


def test_large_sums_are_linear_time():
    """sum() over 20 000 terms builds and flattens exactly (its speed is a benchmark's job, not a test's)."""
    model = sm.CpModel()
    xs = [model.new_bool_var(f"x{i}") for i in range(20_000)]
    expr = sum(np.int64(i % 7 + 1) * x for i, x in enumerate(xs)) - xs[0] + 3
    coefs, constant = expr.flatten()
    assert len(coefs) == 19_999 and constant == 3  # x0 has coefficient 1 - 1 = 0
    assert coefs[xs[6].index] == 7 and coefs[xs[7].index] == 1
    assert sum(coefs.values()) == sum(i % 7 + 1 for i in range(20_000)) - 1
    flat = sm.LinearExpr.weighted_sum(xs, [i % 7 + 1 for i in range(20_000)])
    assert flat.flatten()[0][xs[6].index] == 7


def test_flat_builders_match_the_general_ones():
    """weighted_vars and add_linear_terms state what weighted_sum and add state: the same proto
    entries and the same optimum (x + 2y + 3z maximised under x + y + z <= 2 is 5); repeated
    variables and non-int coefficients are refused."""
    model = sm.CpModel()
    x, y, z = (model.new_bool_var(n) for n in "xyz")
    fast = sm.LinearExpr.weighted_vars([x, y, z], np.array([1, 2, 3]).tolist())
    assert fast.flatten() == sm.LinearExpr.weighted_sum([x, y, z], [1, 2, 3]).flatten()
    assert fast.flatten() == ({0: 1, 1: 2, 2: 3}, 0)
    ct = model.add_linear_terms([x, y, z], [1, 1, 1], 0, 2)
    assert list(ct.proto.linear.vars) == [0, 1, 2] and list(ct.proto.linear.domain) == [0, 2]
    model.minimize(-fast)
    solver = _solver(sm)
    assert solver.solve(model) == sm.OPTIMAL and solver.objective_value == -5
    with pytest.raises(ValueError, match="more than once"):
        sm.LinearExpr.weighted_vars([x, x], [1, 2])
    with pytest.raises(TypeError, match="Python ints"):
        sm.LinearExpr.weighted_vars([x], [1.5])
