/// @file kv_transfer_device.hpp
/// @brief Chapter 11: a real transfer of a paged KV cache from the model that prefilled a
/// sequence (one device) to the model that decodes it (another device), block by block with
/// cudaMemcpyPeer. The receiver keeps the sequence in blocks of its own choosing: block
/// from_blocks[i] of the sender lands in block to_blocks[i] of the receiver, and the receiver's
/// block table names to_blocks. On the simulator the devices are its PD_SIM_DEVICES virtual ones.
#pragma once

#include "pd/model/model.hpp"

#include <span>

namespace pd::model {

/// What one transfer_blocks() call moved, and how long it took.
struct KvTransferStats {
    double bytes = 0;    ///< bytes copied: K and V (and the scales of an 8-bit cache) of every layer and block
    double seconds = 0;  ///< host clock from the first copy to the receiver's device having finished the last
    int copies = 0;      ///< cudaMemcpyPeer calls made
    /// Peer access between the two devices was on (transfer_blocks() enables it where
    /// cudaDeviceCanAccessPeer allows): the copies go device to device over the link. Off, the
    /// runtime stages each copy through host memory, and the time measures that.
    bool peer_access = false;
    /// cudaDevP2PAttrPerformanceRank of the sender to the receiver (0 is the fastest kind of
    /// link on the machine), or -1 without peer access.
    int performance_rank = -1;
};

/// Copies, for every layer and every i, block @p from_blocks [i] of @p from's cache into block
/// @p to_blocks [i] of @p to's cache with cudaMemcpyPeer (K, V, and the scales of an 8-bit
/// cache), from from.device() to to.device(), and waits for the receiver's device. First it
/// enables peer access in both directions where cudaDeviceCanAccessPeer allows (access already
/// enabled counts as enabled). The caller's current device is unchanged.
/// @param from the sender, a paged model  @param from_blocks its blocks to copy
/// @param to the receiver, the same shape, cache type and block size  @param to_blocks where
/// each block goes (distinct ids of its cache)
/// @return the bytes, the seconds and the number of copies
/// @throws std::invalid_argument naming what differs (a ModelConfig or ModelOptions field, the
/// lengths of the block lists, a block id out of range or repeated) before anything is copied
KvTransferStats transfer_blocks(Model& from, std::span<const int> from_blocks, Model& to,
                                std::span<const int> to_blocks);

}  // namespace pd::model
