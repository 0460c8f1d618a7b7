/// @file late.hpp
/// @brief Chapter 99: a later chapter's header, which chapter 98's first step includes.
#pragma once
