#pragma once
// Moved to model/half.h (below both backends); kept until the files that include it here move.
#include "model/half.h"
