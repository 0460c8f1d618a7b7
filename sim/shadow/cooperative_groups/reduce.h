// Shadows the toolkit's cooperative_groups/reduce.h for the simulator build: cg::reduce with
// cg::plus, cg::less, cg::greater, cg::bit_and, cg::bit_or and cg::bit_xor.
#pragma once
#include "pd/sim/cooperative_groups_reduce.hpp"
