/// @file ch98_v3_third.cu
/// @brief v3 = v2 + something, whose header does not say which file it extends.
int third_step = 3;
