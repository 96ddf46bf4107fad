"""A small CP-SAT modelling layer over OR-Tools' compiled ``cp_model_helper`` alone.

Why: ``import ortools.sat.python.cp_model`` costs about 0.45 s because it imports pandas,
which this project never uses. The compiled extension ``cp_model_helper`` that it wraps
imports in about 0.06 s and already exposes the model proto, the parameters and the solve
wrapper. This module builds the proto itself and offers the snake_case subset of the
``cp_model`` API that ``search/cpsat.py`` uses, so switching is nearly mechanical:

    model = CpModel(); x, y = model.new_bool_var("x"), model.new_bool_var("y")
    n = model.new_int_var(0, 9, "n")
    model.add(n + 2 * x <= 7).only_enforce_if(~y)
    model.add_exactly_one([x, y]); model.add_bool_or([x, ~y]); model.minimize(n - x)
    solver = CpSolver(); solver.parameters.num_workers = 1   # a SatParameters
    status = solver.solve(model, callback)   # OPTIMAL, FEASIBLE, INFEASIBLE, ...

It imports nothing from this package (no relative imports), so it can also be loaded alone.

Linear expressions are immutable trees: ``a + b`` and ``k * a`` allocate one small node, so
``sum()`` over n terms is O(n); the tree is flattened (iteratively) into a dict
{variable index: coefficient} plus a constant once, when a constraint, an objective or a
value needs it. ``LinearExpr.sum`` and ``LinearExpr.weighted_sum`` build one flat node.

Literals: a Boolean variable with proto index i, or its negation ``~var`` with index -i-1
(the CP-SAT convention); inside linear expressions ``~var`` counts as ``1 - var``.
Coefficients and bounds must be integers (Python or numpy ints, or integral floats).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from ortools.sat.python import cp_model_helper as _cmh

OPTIMAL = _cmh.OPTIMAL
FEASIBLE = _cmh.FEASIBLE
INFEASIBLE = _cmh.INFEASIBLE
MODEL_INVALID = _cmh.MODEL_INVALID
UNKNOWN = _cmh.UNKNOWN
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

SatParameters = _cmh.SatParameters
CpSolverStatus = _cmh.CpSolverStatus

__all__ = [
    "CpModel",
    "CpSolver",
    "CpSolverSolutionCallback",
    "LinearExpr",
    "IntVar",
    "Var",
    "NotBoolVar",
    "BoundedLinearExpression",
    "Constraint",
    "SatParameters",
    "CpSolverStatus",
    "OPTIMAL",
    "FEASIBLE",
    "INFEASIBLE",
    "MODEL_INVALID",
    "UNKNOWN",
]


def _as_int(value: Any) -> int | None:
    """``value`` (anything) as a Python int when it is an integer (numpy ints, integral floats), else None."""
    if type(value) is int:
        return value
    try:
        return operator.index(value)
    except TypeError:
        pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _coefficient(value: object) -> int:
    k = _as_int(value)
    if k is None:
        raise TypeError(f"coefficients must be integers, got {value!r}")
    return k


class LinearExpr:
    """An integer linear expression; combine with + - * (by an int), compare with <= >= == != < >."""

    __slots__ = ()
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators
    __hash__ = object.__hash__

    # ---- arithmetic: each operator allocates one small node
    def __add__(self, other: object) -> LinearExpr:
        if isinstance(other, LinearExpr):
            return _Add(self, other, 0)
        c = _as_int(other)
        if c is None:
            return NotImplemented
        return self if c == 0 else _Add(self, None, c)

    __radd__ = __add__

    def __sub__(self, other: object) -> LinearExpr:
        if isinstance(other, LinearExpr):
            return _Add(self, _Term(other, -1), 0)
        c = _as_int(other)
        if c is None:
            return NotImplemented
        return self if c == 0 else _Add(self, None, -c)

    def __rsub__(self, other: object) -> LinearExpr:
        c = _as_int(other)
        return NotImplemented if c is None else _Add(_Term(self, -1), None, c)

    def __mul__(self, other: object) -> LinearExpr:
        k = _as_int(other)
        if k is None:
            return NotImplemented
        return self if k == 1 else _Term(self, k)

    __rmul__ = __mul__

    def __neg__(self) -> LinearExpr:
        return _Term(self, -1)

    def __pos__(self) -> LinearExpr:
        return self

    # ---- comparisons: each gives a BoundedLinearExpression on (self - other)
    def _compare(self, other: object, domain: tuple[int, ...], op: str) -> BoundedLinearExpression:
        if not isinstance(other, LinearExpr) and _as_int(other) is None:
            return NotImplemented
        return BoundedLinearExpression(self, other, domain, op)

    def __le__(self, other: object) -> BoundedLinearExpression:
        return self._compare(other, (INT_MIN, 0), "<=")

    def __ge__(self, other: object) -> BoundedLinearExpression:
        return self._compare(other, (0, INT_MAX), ">=")

    def __lt__(self, other: object) -> BoundedLinearExpression:
        return self._compare(other, (INT_MIN, -1), "<")

    def __gt__(self, other: object) -> BoundedLinearExpression:
        return self._compare(other, (1, INT_MAX), ">")

    def __eq__(self, other: object) -> BoundedLinearExpression:  # type: ignore[override]
        return self._compare(other, (0, 0), "==")

    def __ne__(self, other: object) -> BoundedLinearExpression:  # type: ignore[override]
        return self._compare(other, (INT_MIN, -1, 1, INT_MAX), "!=")

    # ---- flat builders (one node, no nesting) and flattening
    @staticmethod
    def sum(expressions: Iterable[LinearExpr | int]) -> LinearExpr:
        """The sum of the expressions (ints allowed) as one flat node."""
        return LinearExpr.weighted_sum(expressions, None)

    @staticmethod
    def weighted_sum(
        expressions: Iterable[LinearExpr | int], coefficients: Iterable[int] | None
    ) -> LinearExpr:
        """sum(c * e) as one flat node; ``coefficients`` None means all ones."""
        terms, constant = [], 0
        pairs = (
            ((e, 1) for e in expressions)
            if coefficients is None
            else zip(expressions, coefficients, strict=True)
        )
        for e, c in pairs:
            k = _coefficient(c)
            if isinstance(e, LinearExpr):
                terms.append((e, k))
            else:
                constant += k * _coefficient(e)
        return _Sum(tuple(terms), constant)

    @staticmethod
    def weighted_vars(variables: Iterable[IntVar], coefficients: Iterable[int]) -> LinearExpr:
        """sum(c * v) over distinct variables with Python int coefficients (``ndarray.tolist()``
        gives them): one flat node built at once, with no per-term checks or walk (the model
        builder's hot path; ``weighted_sum`` takes anything)."""
        variables = list(variables)
        flat = dict(zip([v.index for v in variables], coefficients, strict=True))
        if len(flat) != len(variables):
            raise ValueError("weighted_vars: a variable appears more than once")
        if not all(type(c) is int for c in flat.values()):
            raise TypeError("weighted_vars: coefficients must be Python ints")
        node = _Sum((), 0)
        node._flat = ({i: c for i, c in flat.items() if c}, 0)
        return node

    def flatten(self) -> tuple[dict[int, int], int]:
        """({variable index: non-zero coefficient}, constant), a fresh dict."""
        coefs, constant = _flatten(self)
        return dict(coefs), constant

    def __repr__(self) -> str:
        coefs, constant = _flatten(self)
        return " + ".join([f"{c}*x{i}" for i, c in coefs.items()] + [str(constant)])


class IntVar(LinearExpr):
    """A model variable; ``index`` is its position in the proto."""

    __slots__ = ("index", "name", "is_boolean", "_negation")

    def __init__(self, index: int, name: str, is_boolean: bool) -> None:
        self.index, self.name, self.is_boolean = index, name, is_boolean
        self._negation: NotBoolVar | None = None

    def __invert__(self) -> NotBoolVar:
        if not self.is_boolean:
            raise TypeError(f"~ needs a Boolean variable, {self.name} is not")
        if self._negation is None:
            self._negation = NotBoolVar(self)
        return self._negation

    def __repr__(self) -> str:
        return self.name or f"x{self.index}"


class NotBoolVar(LinearExpr):
    """The negation of a Boolean variable: literal index -i-1, value 1 - var."""

    __slots__ = ("var",)

    def __init__(self, var: IntVar) -> None:
        self.var = var

    @property
    def index(self) -> int:
        return -self.var.index - 1

    def __invert__(self) -> IntVar:
        return self.var

    def __repr__(self) -> str:
        return f"not({self.var!r})"


class _Term(LinearExpr):
    """coef * expr."""

    __slots__ = ("expr", "coef")
    expr: LinearExpr
    coef: int

    def __init__(self, expr: LinearExpr, coef: int) -> None:
        if type(expr) is _Term:  # k * (j * e) -> (k j) * e
            coef = expr.coef * coef
            expr = expr.expr
        self.expr, self.coef = expr, coef


class _Add(LinearExpr):
    """left + right + constant (right may be None); the flattened form is cached on first use."""

    __slots__ = ("left", "right", "constant", "_flat")
    left: LinearExpr
    right: LinearExpr | None
    constant: int
    _flat: tuple[dict[int, int], int] | None

    def __init__(self, left: LinearExpr, right: LinearExpr | None, constant: int) -> None:
        self.left, self.right, self.constant = left, right, constant
        self._flat = None


class _Sum(LinearExpr):
    """sum(coef * expr for expr, coef in terms) + constant, from LinearExpr.sum / weighted_sum."""

    __slots__ = ("terms", "constant", "_flat")
    terms: tuple[tuple[LinearExpr, int], ...]
    constant: int
    _flat: tuple[dict[int, int], int] | None

    def __init__(self, terms: tuple[tuple[LinearExpr, int], ...], constant: int) -> None:
        self.terms, self.constant = terms, constant
        self._flat = None


Var = IntVar  # short alias
Literal = IntVar | NotBoolVar


def _flatten(expr: LinearExpr) -> tuple[dict[int, int], int]:
    """({index: coef}, constant) of ``expr``, cached on it when it is a sum node. Walks the tree
    with an explicit stack: sum() builds left-deep trees as deep as they are long."""
    cached = getattr(expr, "_flat", None)
    if cached is not None:
        return cached
    coefs: dict[int, int] = {}
    constant = _walk(expr, coefs)
    flat = ({i: c for i, c in coefs.items() if c}, constant)
    if isinstance(expr, (_Add, _Sum)):
        expr._flat = flat
    return flat


def _walk(expr: LinearExpr, coefs: dict[int, int]) -> int:
    """Adds the coefficients of ``expr`` into ``coefs``; returns its constant."""
    constant = 0
    # nodes are dispatched on their exact type (``kind``, one type() call per node: this loop is hot),
    # which a type checker does not narrow through, hence Any
    stack: list[tuple[Any, int]] = [(expr, 1)]
    pop, push, get = stack.pop, stack.append, coefs.get
    while stack:
        node, m = pop()
        kind = type(node)
        if kind is _Term:
            m *= node.coef
            node, kind = node.expr, type(node.expr)
        if kind is IntVar:
            i = node.index
            coefs[i] = get(i, 0) + m
        elif kind is _Add:
            if node._flat is not None:
                constant += _merge(coefs, node._flat, m)
                continue
            constant += m * node.constant
            push((node.left, m))
            if node.right is not None:
                push((node.right, m))
        elif kind is NotBoolVar:
            i = node.var.index
            coefs[i] = get(i, 0) - m
            constant += m
        elif node._flat is not None:  # _Sum
            constant += _merge(coefs, node._flat, m)
        else:
            constant += m * node.constant
            for child, k in node.terms:
                push((child, m * k))
    return constant


def _merge(coefs: dict[int, int], flat: tuple[dict[int, int], int], m: int) -> int:
    """Adds m * flat into coefs; returns m * its constant."""
    get = coefs.get
    for i, c in flat[0].items():
        coefs[i] = get(i, 0) + m * c
    return m * flat[1]


def _flat_of(expr: object) -> tuple[dict[int, int], int]:
    if isinstance(expr, LinearExpr):
        return _flatten(expr)
    return {}, _coefficient(expr)


class BoundedLinearExpression:
    """``left - right`` constrained to a domain (sorted interval bounds, INT_MIN/INT_MAX unbounded)."""

    __slots__ = ("left", "right", "domain", "op")

    def __init__(self, left: LinearExpr, right: object, domain: tuple[int, ...], op: str) -> None:
        """``right``: an expression or an integer-valued number (kept as given)."""
        self.left, self.right, self.domain, self.op = left, right, domain, op

    def __bool__(self) -> bool:
        """Only ``a == b`` / ``a != b`` between expressions has a truth value: identity (so
        ``var in list`` works); any other comparison is a constraint, never a bool."""
        if self.op not in ("==", "!=") or not isinstance(self.right, LinearExpr):
            raise TypeError(
                f"a linear constraint ({self.op}) has no truth value; pass it to CpModel.add"
            )
        same = self.left is self.right
        return same if self.op == "==" else not same

    def flatten(self) -> tuple[dict[int, int], int]:
        """({index: coef}, constant) of left - right (may share the cache of one side: do not mutate)."""
        left, lconst = _flatten(self.left)
        right, rconst = _flat_of(self.right)
        if not right:
            return left, lconst - rconst
        if len(left) >= len(right):
            coefs = dict(left)
            _merge(coefs, (right, 0), -1)
        else:
            coefs = {i: -c for i, c in right.items()}
            _merge(coefs, (left, 0), 1)
        return {i: c for i, c in coefs.items() if c}, lconst - rconst

    def __repr__(self) -> str:
        return f"{self.left!r} {self.op} {self.right!r}"


def _shift(domain: tuple[int, ...], offset: int) -> list[int]:
    """domain - offset, keeping the infinite ends infinite and the rest within int64."""
    out = []
    for b in domain:
        out.append(b if b in (INT_MIN, INT_MAX) else min(INT_MAX, max(INT_MIN, b - offset)))
    return out


def _literal_index(literal: object) -> int:
    if isinstance(literal, IntVar):
        if not literal.is_boolean:
            raise TypeError(f"{literal.name} is not a Boolean variable")
        return literal.index
    if isinstance(literal, NotBoolVar):
        return literal.index
    raise TypeError(f"expected a Boolean variable or its negation, got {literal!r}")


def _literal_indices(literals: Iterable[object]) -> list[int]:
    return [_literal_index(lit) for lit in literals]


class Constraint:
    """A constraint in the model; ``only_enforce_if`` adds enforcement literals."""

    __slots__ = ("proto", "index")

    def __init__(self, proto: _cmh.ConstraintProto, index: int) -> None:
        self.proto, self.index = proto, index

    def only_enforce_if(self, *literals: Literal | Iterable[Literal]) -> Constraint:
        """Enforced only when all the literals are true (one literal, several, or a list)."""
        if len(literals) == 1 and not isinstance(literals[0], LinearExpr):
            literals = tuple(literals[0])
        self.proto.enforcement_literal.extend(_literal_indices(literals))
        return self


class CpModel:
    """Variables, constraints, objective and assumptions, stored in a ``CpModelProto``."""

    def __init__(self) -> None:
        self.proto = _cmh.CpModelProto()
        self._num_vars = 0
        self._num_constraints = 0
        self._names: list[
            str
        ] = []  # kept here, not in the proto: a proto name costs 20x the variable

    # ---- variables
    def new_int_var(self, lb: int, ub: int, name: str) -> IntVar:
        lo, hi = _coefficient(lb), _coefficient(ub)
        var = self.proto.variables.add()
        var.domain.extend([lo, hi])
        self._names.append(name)
        self._num_vars += 1
        return IntVar(self._num_vars - 1, name, 0 <= lo and hi <= 1)

    def new_bool_var(self, name: str) -> IntVar:
        var = self.proto.variables.add()
        var.domain.extend((0, 1))
        self._names.append(name)
        self._num_vars += 1
        return IntVar(self._num_vars - 1, name, True)

    # ---- constraints
    def _new_constraint(self):
        self._num_constraints += 1
        return self.proto.constraints.add(), self._num_constraints - 1

    def add(self, constraint: BoundedLinearExpression | bool) -> Constraint:
        """A linear comparison (``expr <= 5``, ``a == b + 1``...) or a constant True/False."""
        if isinstance(constraint, BoundedLinearExpression):
            return self._add_linear(constraint)
        if type(constraint).__name__ in ("bool", "bool_"):  # e.g. 0 == 0 from an empty sum
            ct, index = self._new_constraint()
            (ct.bool_and if constraint else ct.bool_or).literals.extend(
                []
            )  # empty and: true, or: false
            return Constraint(ct, index)
        raise TypeError(f"CpModel.add takes a linear comparison, got {constraint!r}")

    def _add_linear(self, bounded: BoundedLinearExpression) -> Constraint:
        coefs, constant = bounded.flatten()
        ct, index = self._new_constraint()
        ct.linear.vars.extend(coefs.keys())
        ct.linear.coeffs.extend(coefs.values())
        ct.linear.domain.extend(_shift(bounded.domain, constant))
        return Constraint(ct, index)

    def add_linear_terms(
        self, variables: Iterable[IntVar], coefficients: Iterable[int], lower: int, upper: int
    ) -> Constraint:
        """lower <= sum(c * v) <= upper over distinct variables with Python int coefficients,
        written straight into the proto (the model builder's many small sums)."""
        ct, index = self._new_constraint()
        ct.linear.vars.extend([v.index for v in variables])
        ct.linear.coeffs.extend(coefficients)
        ct.linear.domain.extend([_coefficient(lower), _coefficient(upper)])
        return Constraint(ct, index)

    def add_exactly_one(self, literals: Iterable[Literal]) -> Constraint:
        ct, index = self._new_constraint()
        ct.exactly_one.literals.extend(_literal_indices(literals))
        return Constraint(ct, index)

    def add_bool_or(self, literals: Iterable[Literal]) -> Constraint:
        ct, index = self._new_constraint()
        ct.bool_or.literals.extend(_literal_indices(literals))
        return Constraint(ct, index)

    # ---- objective and assumptions
    def minimize(self, expr: LinearExpr | int) -> None:
        """Sets the objective (replacing any previous one) to minimise ``expr``."""
        coefs, constant = _flat_of(expr)
        self.proto.clear_objective()
        objective = self.proto.objective
        objective.vars.extend(coefs.keys())
        objective.coeffs.extend(coefs.values())
        objective.offset = float(constant)
        objective.scaling_factor = 1.0

    def set_hint(self, values: dict[IntVar, int]) -> None:
        """A solution to start from (replacing any previous hint): {variable: value}, any subset."""
        self.proto.clear_solution_hint()
        hint = self.proto.solution_hint
        hint.vars.extend(var.index for var in values)
        hint.values.extend(_coefficient(x) for x in values.values())

    def has_objective(self) -> bool:
        return self.proto.has_objective()

    def add_assumptions(self, literals: Iterable[Literal]) -> None:
        self.proto.assumptions.extend(_literal_indices(literals))

    def clear_assumptions(self) -> None:
        self.proto.assumptions.clear()

    def clone(self) -> CpModel:
        """A copy of the model; variables of this model keep their meaning (same indices)."""
        copy = CpModel()
        copy.proto.copy_from(self.proto)
        copy._num_vars, copy._num_constraints = self._num_vars, self._num_constraints
        copy._names = list(self._names)
        return copy

    def get_bool_var_from_proto_index(self, index: int) -> IntVar:
        """The Boolean variable at ``index`` of the proto (e.g. of an original model in its clone)."""
        var = self.proto.variables[index]
        lo, hi = list(var.domain)[0], list(var.domain)[-1]
        if not (0 <= lo and hi <= 1):
            raise TypeError(f"variable {index} is not Boolean")
        return IntVar(index, self._names[index], True)

    def validate(self) -> str:
        """An empty string when the proto is valid, else the first problem found."""
        return _cmh.CpSatHelper.validate_model(self.proto)


def _evaluate(expr: LinearExpr | int, value_of) -> int:
    coefs, constant = _flat_of(expr)
    return constant + sum(c * value_of(i) for i, c in coefs.items())


def _literal_value(literal: Literal | bool, value_of) -> bool:
    if isinstance(literal, bool):
        return literal
    if isinstance(literal, NotBoolVar):
        return not value_of(literal.var.index)
    return bool(value_of(_literal_index(literal)))


class CpSolverSolutionCallback(_cmh.SolutionCallback):
    """Subclass and override ``on_solution_callback``; read ``objective_value``, ``value()``..."""

    def __init__(self) -> None:
        _cmh.SolutionCallback.__init__(self)

    def OnSolutionCallback(self) -> None:  # noqa: N802 (called by the C++ solver)
        self.on_solution_callback()

    def on_solution_callback(self) -> None:
        """Called at each improving solution."""

    @property
    def objective_value(self) -> float:
        return self.ObjectiveValue()

    @property
    def best_objective_bound(self) -> float:
        return self.BestObjectiveBound()

    @property
    def wall_time(self) -> float:
        return self.WallTime()

    def value(self, expr: LinearExpr | int) -> int:
        return _evaluate(expr, self.SolutionIntegerValue)

    def boolean_value(self, literal: Literal | bool) -> bool:
        return _literal_value(literal, self.SolutionIntegerValue)


class CpSolver:
    """Solves a CpModel; ``parameters`` is a SatParameters (max_time_in_seconds, num_workers...)."""

    def __init__(self) -> None:
        self.parameters = _cmh.SatParameters()
        self._response: _cmh.CpSolverResponse | None = None
        self._solution: list[int] = []

    def solve(
        self, model: CpModel, solution_callback: CpSolverSolutionCallback | None = None
    ) -> CpSolverStatus:
        """Solves ``model``, calling ``solution_callback`` at each solution; returns the status."""
        wrapper = _cmh.SolveWrapper()
        wrapper.set_parameters(self.parameters)
        if solution_callback is not None:
            wrapper.add_solution_callback(solution_callback)
        try:
            self._response = wrapper.solve(model.proto)
        finally:
            if solution_callback is not None:
                wrapper.clear_solution_callback(solution_callback)
        self._solution = list(self._response.solution)
        return self._response.status

    @property
    def response_proto(self) -> _cmh.CpSolverResponse:
        if self._response is None:
            raise RuntimeError("solve() has not been called")
        return self._response

    def _value_of(self, index: int) -> int:
        if not self._solution:
            raise RuntimeError("no solution: solve() was not called or found none")
        return self._solution[index]

    def value(self, expr: LinearExpr | int) -> int:
        """The value of a linear expression in the last solution."""
        return _evaluate(expr, self._value_of)

    def boolean_value(self, literal: Literal | bool) -> bool:
        """The value of a Boolean variable or its negation in the last solution."""
        return _literal_value(literal, self._value_of)

    # the last solve's objective, bound and wall time, read from its response
    objective_value = property(lambda self: self.response_proto.objective_value)
    best_objective_bound = property(lambda self: self.response_proto.best_objective_bound)
    wall_time = property(lambda self: self.response_proto.wall_time)

    def status_name(self, status: CpSolverStatus | None = None) -> str:
        return (self.response_proto.status if status is None else CpSolverStatus(int(status))).name
