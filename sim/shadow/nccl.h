// NCCL on the simulator: the subset of NCCL's API that the course uses, declared with the
// signatures, types and enumerator values of NCCL 2.x's nccl.h, so that one source builds
// against the real library on GPUs (nvcc finds the toolkit's nccl.h) and against this one on
// the simulator (which puts sim/shadow/ first on its include path). The implementation is
// sim/src/nccl.cpp: each rank is a communicator on one of the PD_SIM_DEVICES virtual devices;
// a collective runs when every rank of its communicator has called it, on the host, and checks
// what NCCL leaves undefined (ranks that disagree on the collective, its count, type, operation or
// root; a rank that never joins). docs/simulator.md describes it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22800
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
/// Defined only by the simulator's nccl.h.
#define PD_SIM_NCCL 1

#ifdef __cplusplus
extern "C" {
#endif

/// A communicator: one rank of a clique (opaque).
typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/// What ncclGetUniqueId makes and every rank passes to ncclCommInitRank.
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/// Error type.
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

/// Reduction operations.
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

/// Data types (fp8 ones are declared but refused by the simulator).
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/// NCCL's version as NCCL_VERSION() codes it.
ncclResult_t ncclGetVersion(int* version);
/// A new clique's id, to be handed to every rank.
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
/// Joins rank @p rank of @p nranks to the clique @p commId on the calling thread's current device;
/// returns when every rank has joined (one host thread per rank).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
/// Creates a clique of @p ndev ranks, rank i on devlist[i] (or device i when devlist is NULL), from
/// one thread.
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
/// Frees a communicator.
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/// Ranks of the communicator's clique.
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
/// The device the communicator's rank runs on.
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
/// The communicator's rank.
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
/// A human-readable error string.
const char* ncclGetErrorString(ncclResult_t result);
/// The message of the calling thread's last error.
const char* ncclGetLastError(ncclComm_t comm);

/// Every rank's recvbuff gets the reduction over the ranks of their sendbuff (count elements).
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
/// Every rank's recvbuff gets rank @p root's sendbuff.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
/// Every rank's recvbuff [nranks x sendcount] gets each rank's sendbuff at rank x sendcount.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
/// Rank r's recvbuff [recvcount] gets block r of the reduction of every rank's sendbuff
/// [nranks x recvcount].
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/// Sends count elements to rank @p peer, which receives them with ncclRecv.
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
/// Receives count elements from rank @p peer.
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
/// Starts a group: the calls until ncclGroupEnd are issued together (one thread driving several
/// ranks must group their calls).
ncclResult_t ncclGroupStart(void);
/// Ends a group: issues its calls and returns when they have completed.
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}  // extern "C"
#endif
