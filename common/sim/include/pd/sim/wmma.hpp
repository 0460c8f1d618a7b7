/// @file wmma.hpp
/// @brief nvcuda::wmma on the simulator (filled in with the tensor-core support).
#pragma once
