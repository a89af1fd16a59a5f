// pm_ucx_probe: do one-sided READs of a region complete while the memory node does not progress UCX?
// Compares UCP_MEM_MAP_ALLOCATE memory with a pmem_map_file mapping registered by address (what
// --pm-path does). An experiment, not a test (it times a 3 s sleep): see docs/results.md.
// usage: mpirun -n 2 pm_ucx_probe [file]
#include <mpi.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include "rdmahash/pmem.h"
#include "rdmahash/ucx_fabric.h"
using namespace rdmahash;
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool use_file = argc > 1 && std::strcmp(argv[1], "file") == 0;
  const uint64_t bytes = 1 << 20;
  UcxFabricConfig fc; fc.memory_nodes = 1; fc.region_bytes = bytes;
  std::unique_ptr<PmemFile> f;
  if (rank == 0 && use_file) {
    unlink("pm_ucx_probe.pm");
    f = std::make_unique<PmemFile>(PmemFile::open("pm_ucx_probe.pm", bytes));
    std::memset(f->bytes().data(), 0x5a, bytes);
    fc.region_address = f->bytes().data();
  }
  auto fabric = UcxFabric::create(fc);
  if (rank == 0 && !use_file) std::memset(fabric->local_region(0).data(), 0x5a, bytes);
  fabric->barrier();
  if (rank == 0) {
    sleep(3);  // no UCX progress on the memory node for 3 s
    fabric->serve();
  } else {
    auto t = fabric->connect();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::byte> buf(512);
    bool ok = true;
    for (int i = 0; i < 1000; ++i) {
      Request r; r.kind = ReqKind::kRead; r.addr = {0, uint64_t(i) * 512}; r.buf = buf.data(); r.len = 512;
      t->execute(std::span<Request>(&r, 1));
      ok &= buf[0] == std::byte{0x5a};
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: 1000 READs of 512 B took %.3f s while the memory node slept 3 s (values %s)\n",
                use_file ? "pmem file mapping, no ALLOCATE" : "UCP_MEM_MAP_ALLOCATE", s, ok ? "ok" : "WRONG");
    fabric->client_done();
  }
  fabric->barrier();
  fabric.reset();
  if (rank == 0 && use_file) unlink("pm_ucx_probe.pm");
  MPI_Finalize();
}
