// The one main() of engine-tests; every other tests/*.cpp only holds test cases.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
