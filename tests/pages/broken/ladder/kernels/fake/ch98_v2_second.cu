/// @file ch98_v2_second.cu
/// @brief v2 = v1 + something. Predecessor: ch98_v1_missing.cu, a file that does not exist.
int second_step = 2;
