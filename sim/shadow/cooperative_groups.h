// Shadows the toolkit's cooperative_groups.h for the simulator build (nvcc keeps the toolkit's):
// the block-level groups, built on the simulator's barriers and warp intrinsics.
#pragma once
#include "pd/sim/cooperative_groups.hpp"
