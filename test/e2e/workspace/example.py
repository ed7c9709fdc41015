"""Number helpers. The end-to-end test types a new function at the end of this file."""


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def factorial(n: int) -> int:
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result

