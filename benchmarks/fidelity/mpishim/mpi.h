/* A stand-in for the MPI subset nccl-tests uses (src/common.cu, common.h), for N processes on ONE host:
 * nccl-tests built with -DMPI_SUPPORT against this header runs one process per GPU, the launch shape of
 * `mpirun -np N all_reduce_perf -g 1`, without an MPI installation. The processes meet in a shared
 * memory file; barriers spin on it. Launch them with helpers.fidelity.run_processes, which sets
 * NCCLTESTS_SHIM_RANK, NCCLTESTS_SHIM_SIZE and NCCLTESTS_SHIM_FILE. Ours (benchmarks/fidelity/). */
#ifndef NCCLTESTS_MPI_SHIM_H
#define NCCLTESTS_MPI_SHIM_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
#define MPI_COMM_WORLD 1
#define MPI_DATATYPE_NULL 0
#define MPI_BYTE 1
#define MPI_INT 2
#define MPI_LONG 3
#define MPI_LONG_LONG 4
#define MPI_DOUBLE 5
#define MPI_SUM 1
#define MPI_MIN 2
#define MPI_MAX 3
#define MPI_IN_PLACE ((void *)1)
#define MPI_SUCCESS 0
int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount,
                  MPI_Datatype rtype, MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount,
               MPI_Datatype rtype, int root, MPI_Comm comm);
#ifdef __cplusplus
}
#endif
#endif
