/// @file ch98_v1_first.cu
/// @brief A fake chapter's first step (no predecessor), which its page does not name and which
/// includes a later chapter's header.
#include "fake/late.hpp"
int first_step = 1;
