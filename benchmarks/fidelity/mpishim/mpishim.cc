// The MPI subset of mpi.h for N processes on one host, through a shared memory file. Ours.
#include "mpi.h"
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {
const int kMaxRanks = 64;
const size_t kSlot = 8192;                       // bytes per rank per exchange (nccl-tests' lines: 2048)
struct Shared {
  int count;                                     // arrivals at the current barrier
  int sense;                                     // flips when a barrier completes
  char pad[56];
  char slot[kMaxRanks][kSlot];
};
Shared *S = nullptr;
int rank_ = 0, size_ = 1, sense_ = 0;
long spin_limit_ = 1L << 20;   // pause-spins before a waiting rank yields its core (MPI_Init: 0 with more ranks than cores)

void die(const char *what) {
  fprintf(stderr, "mpishim (rank %d): %s\n", rank_, what);
  exit(3);
}

int tsize(MPI_Datatype t) {
  switch (t) {
    case MPI_BYTE: return 1;
    case MPI_INT: return 4;
    case MPI_LONG: case MPI_LONG_LONG: case MPI_DOUBLE: return 8;
  }
  die("unsupported MPI_Datatype");
  return 0;
}

void barrier() {                                 // sense-reversing spin barrier
  sense_ = !sense_;
  if (__atomic_add_fetch(&S->count, 1, __ATOMIC_ACQ_REL) == size_) {
    __atomic_store_n(&S->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&S->sense, sense_, __ATOMIC_RELEASE);
  } else {
    // spin (a timed block starts within a fraction of a us of the last arrival); after many spins give
    // the core away, so that more processes than cores still make progress. With more ranks than cores a
    // spin only keeps the rank it waits for off the core: yield at once (8 ranks on 2 cores spent 28 s of
    // CPU in one short check, spinning)
    for (long spins = 0; __atomic_load_n(&S->sense, __ATOMIC_ACQUIRE) != sense_; spins++) {
      if (spins < spin_limit_) __builtin_ia32_pause();
      else sched_yield();
    }
  }
}

template <typename T> void reduce(T *acc, const T *x, int n, MPI_Op op) {
  for (int i = 0; i < n; i++) {
    if (op == MPI_SUM) acc[i] += x[i];
    else if (op == MPI_MIN) acc[i] = x[i] < acc[i] ? x[i] : acc[i];
    else if (op == MPI_MAX) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
    else die("unsupported MPI_Op");
  }
}

void check(size_t bytes) {
  if (bytes > kSlot) die("message larger than a slot");
}
}  // namespace

extern "C" {
int MPI_Init(int *, char ***) {
  const char *r = getenv("NCCLTESTS_SHIM_RANK"), *n = getenv("NCCLTESTS_SHIM_SIZE"),
             *f = getenv("NCCLTESTS_SHIM_FILE");
  if (!r || !n || !f) die("NCCLTESTS_SHIM_RANK, NCCLTESTS_SHIM_SIZE and NCCLTESTS_SHIM_FILE must be set "
                          "(launch through benchmarks/fidelity.py)");
  rank_ = atoi(r), size_ = atoi(n);
  if (size_ < 1 || size_ > kMaxRanks || rank_ < 0 || rank_ >= size_) die("bad rank or size");
  if (size_ > sysconf(_SC_NPROCESSORS_ONLN)) spin_limit_ = 0;
  int fd = open(f, O_RDWR);
  if (fd < 0) die("cannot open the shared file");
  if (ftruncate(fd, sizeof(Shared)) != 0) die("cannot size the shared file");
  void *p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) die("cannot map the shared file");
  S = (Shared *)p;
  barrier();
  return MPI_SUCCESS;
}
int MPI_Finalize(void) { barrier(); munmap(S, sizeof(Shared)); return MPI_SUCCESS; }
int MPI_Comm_size(MPI_Comm, int *size) { *size = size_; return MPI_SUCCESS; }
int MPI_Comm_rank(MPI_Comm, int *rank) { *rank = rank_; return MPI_SUCCESS; }
int MPI_Comm_free(MPI_Comm *) { return MPI_SUCCESS; }
int MPI_Barrier(MPI_Comm) { barrier(); return MPI_SUCCESS; }
int MPI_Comm_split(MPI_Comm comm, int color, int, MPI_Comm *newcomm) {
  memcpy(S->slot[rank_], &color, sizeof color);
  barrier();
  for (int p = 0; p < size_; p++)
    if (memcmp(S->slot[p], &color, sizeof color) != 0) die("MPI_Comm_split into several groups is not supported");
  barrier();
  *newcomm = comm;
  return MPI_SUCCESS;
}
int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm) {
  size_t b = (size_t)count * tsize(type);
  check(b);
  if (rank_ == root) memcpy(S->slot[root], buf, b);
  barrier();
  if (rank_ != root) memcpy(buf, S->slot[root], b);
  barrier();
  return MPI_SUCCESS;
}
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm) {
  size_t b = (size_t)count * tsize(type);
  check(b);
  memcpy(S->slot[rank_], sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, b);
  barrier();
  char acc[kSlot];
  memcpy(acc, S->slot[0], b);
  for (int p = 1; p < size_; p++) {
    const void *x = S->slot[p];
    switch (type) {
      case MPI_INT: reduce((int *)acc, (const int *)x, count, op); break;
      case MPI_LONG: reduce((long *)acc, (const long *)x, count, op); break;
      case MPI_LONG_LONG: reduce((long long *)acc, (const long long *)x, count, op); break;
      case MPI_DOUBLE: reduce((double *)acc, (const double *)x, count, op); break;
      default: die("unsupported MPI_Allreduce type");
    }
  }
  barrier();
  memcpy(recvbuf, acc, b);
  return MPI_SUCCESS;
}
int MPI_Allgather(const void *sendbuf, int, MPI_Datatype, void *recvbuf, int rcount, MPI_Datatype rtype,
                  MPI_Comm) {
  size_t b = (size_t)rcount * tsize(rtype);
  check(b);
  char *out = (char *)recvbuf;
  memcpy(S->slot[rank_], sendbuf == MPI_IN_PLACE ? out + rank_ * b : sendbuf, b);
  barrier();
  for (int p = 0; p < size_; p++) memcpy(out + p * b, S->slot[p], b);
  barrier();
  return MPI_SUCCESS;
}
int MPI_Gather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int, MPI_Datatype,
               int root, MPI_Comm) {
  size_t b = (size_t)scount * tsize(stype);
  check(b);
  memcpy(S->slot[rank_], sendbuf, b);
  barrier();
  if (rank_ == root)
    for (int p = 0; p < size_; p++) memcpy((char *)recvbuf + p * b, S->slot[p], b);
  barrier();
  return MPI_SUCCESS;
}
}
