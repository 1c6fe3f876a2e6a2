// Exercises every call of mpishim the way nccl-tests makes it; tests/test_mpishim.py runs it as several
// processes through helpers.fidelity.run_processes and checks what each rank prints. Ours.
#include "mpi.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  double d = r + 1;                                      // BenchTime's average: a sum over ranks
  MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  long m = 100 - r;                                      // the smallest GPU memory
  MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  long long x = r;
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  uint64_t h[64];                                        // host hashes, gathered in place
  h[r] = 1000 + r;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD);
  char id[128] = {0};                                    // the NCCL unique id from rank 0
  if (r == 0) snprintf(id, sizeof id, "unique-id");
  MPI_Bcast(id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  char line[2048], all[64 * 2048];                       // the device lines, gathered to rank 0
  snprintf(line, sizeof line, "line-%d", r);
  MPI_Gather(line, sizeof line, MPI_BYTE, all, sizeof line, MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, 0, r, &c);
  int cn;
  MPI_Comm_size(c, &cn);
  for (int i = 0; i < 1000; i++) MPI_Barrier(MPI_COMM_WORLD);
  printf("rank %d size %d sum %g min %ld max %lld hash_last %lu id %s split %d", r, n, d, m, x,
         (unsigned long)h[n - 1], id, cn);
  if (r == 0)
    for (int p = 0; p < n; p++) printf(" %s", all + p * 2048);
  printf("\n");
  MPI_Comm_free(&c);
  MPI_Finalize();
  return 0;
}
