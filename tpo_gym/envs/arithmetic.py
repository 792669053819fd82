"""A safe calculator: exact arithmetic on whole numbers, parsed by a small grammar (never ``eval``).

Grammar (usual precedence, ``^`` and ``**`` bind tightest and group to the right, so ``-2^2 = -4`` and
``2^3^2 = 2^9``)::

    expression := term (("+" | "-") term)*
    term       := unary (("*" | "/") unary)*
    unary      := ("+" | "-") unary | power
    power      := atom (("^" | "**") unary)?
    atom       := digits | "(" expression ")"

Values are exact fractions (:class:`fractions.Fraction`): a division that is not whole gives ``p/q``
(``7/2``). Limits keep every input cheap: at most :data:`MAX_EXPRESSION_CHARS` characters, at most
:data:`MAX_DEPTH` nested parentheses or signs, and no number (a literal, an intermediate value or the result,
numerator or denominator) with more than :data:`MAX_DIGITS` digits; a power is refused before it is
computed when its result would be too large. Anything else (a name, a dot, ``__import__('os')``) is a
:class:`CalculatorError` with a one-line message.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "MAX_EXPRESSION_CHARS", "CalculatorError", "calculate"]

MAX_EXPRESSION_CHARS = 100
MAX_DIGITS = 30
MAX_DEPTH = 20
_LIMIT = 10**MAX_DIGITS
_SPACES = re.compile(r"[ \t\n\r]*")
_TOKEN_RE = re.compile(r"[0-9]+|\*\*|[-+*/^()]")
_ALLOWED = "digits, spaces, + - * / ^ ** ( )"


class CalculatorError(ValueError):
    """An expression the calculator refuses: bad syntax, division by zero, a number over the limits."""


def calculate(expression: str) -> Fraction:
    """The exact value of an arithmetic ``expression`` (see the module docstring for the grammar and limits).

    Raises :class:`CalculatorError` for anything outside the grammar or the limits.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    parser = _Parser(_tokenize(expression))
    value = parser.expression()
    if parser.peek() is not None:
        raise _unexpected(parser.take())
    return value


def _tokenize(expression: str) -> list[str]:
    """The numbers and operators of ``expression``; a :class:`CalculatorError` at any other character."""
    tokens, position = [], _SPACES.match(expression).end()
    while position < len(expression):
        match = _TOKEN_RE.match(expression, position)
        if match is None:
            raise CalculatorError(f"unexpected character at position {position}; allowed: {_ALLOWED}")
        tokens.append(match.group())
        position = _SPACES.match(expression, match.end()).end()
    if not tokens:
        raise CalculatorError("empty expression")
    return tokens


def _unexpected(token: str) -> CalculatorError:
    """The error for a token out of place (a number is not echoed: it may be long)."""
    return CalculatorError("unexpected number" if token.isdigit() else f"unexpected {token!r}")


def _checked(value: Fraction) -> Fraction:
    """``value`` if its numerator and denominator have at most ``MAX_DIGITS`` digits."""
    if abs(value.numerator) >= _LIMIT or value.denominator >= _LIMIT:
        raise CalculatorError(f"number too large: more than {MAX_DIGITS} digits")
    return value


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    """``base ** exponent`` for a whole exponent, refused before it is computed when the result must exceed
    the limit: a numerator or denominator ``m >= 2`` raised to ``|e|`` has at least ``(bits(m) - 1) |e|``
    bits."""
    if exponent.denominator != 1:
        raise CalculatorError("the exponent must be a whole number")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    largest = max(abs(base.numerator), base.denominator)
    if (largest.bit_length() - 1) * abs(exponent.numerator) > _LIMIT.bit_length():
        raise CalculatorError(f"number too large: more than {MAX_DIGITS} digits")
    return _checked(base**exponent.numerator)


class _Parser:
    """Recursive descent over the tokens, one method per rule of the grammar."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.position, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise CalculatorError("unexpected end of expression")
        self.position += 1
        return token

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(f"more than {MAX_DEPTH} nested parentheses or signs")

    def expression(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            operator, right = self.take(), self.term()
            value = _checked(value + right if operator == "+" else value - right)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            operator, right = self.take(), self.unary()
            if operator == "/" and right == 0:
                raise CalculatorError("division by zero")
            value = _checked(value * right if operator == "*" else value / right)
        return value

    def unary(self) -> Fraction:
        if self.peek() not in ("+", "-"):
            return self.power()
        sign = self.take()
        self.nested()
        value = self.unary()
        self.depth -= 1
        return -value if sign == "-" else value

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            return _power(base, self.unary())
        return base

    def atom(self) -> Fraction:
        token = self.take()
        if token.isdigit():
            return _checked(Fraction(int(token)))
        if token != "(":
            raise _unexpected(token)
        self.nested()
        value = self.expression()
        if self.peek() != ")":
            raise CalculatorError("missing ')'")
        self.take()
        self.depth -= 1
        return value
