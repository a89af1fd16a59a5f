// serve_dead_sender_probe ADDR: a `rdmahash serve` client that dies in the middle of sending an
// RPC, at the instruction where a killed client hurts the others most (tests/serve_dead_sender_test.sh).
//
// It connects as `bench --connect` does, then posts one RPC whose payload lies in a page it cannot
// read (PROT_NONE). UCX copies an eager message's payload only after it has reserved the message's
// place in the receiver's queue (over shared memory: the CAS on the head of the memory node's
// receive FIFO, uct_mm_ep_am_common_send), so the copy faults with the place reserved and never
// filled: exactly what a client killed between those two instructions leaves behind. The process
// dies by SIGSEGV; it never returns normally (exit 3 if it does: the test is then void).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/ucx_service.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: serve_dead_sender_probe HOST:PORT\n");
    return 2;
  }
  auto conn = rdmahash::connect_ucx_servers({argv[1]});
  auto transport = conn.fabric->connect();
  const long page = ::sysconf(_SC_PAGESIZE);
  void* p = ::mmap(nullptr, static_cast<size_t>(page), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    return 2;
  }
  std::vector<std::byte> reply;
  rdmahash::Request r;
  r.kind = rdmahash::ReqKind::kRpc;
  r.addr = {0, 0};
  r.rpc_id = 1;
  r.buf = p;
  r.len = 64;  // small: an eager message (copied into the queue, not fetched by the receiver)
  r.reply = &reply;
  std::printf("connected as client %u; sending an RPC from an unreadable page\n", conn.client_id);
  std::fflush(stdout);
  try {
    transport->execute(std::span<rdmahash::Request>(&r, 1));
  } catch (const std::exception& e) {
    std::printf("the RPC failed without a fault: %s\n", e.what());
    return 3;
  }
  std::printf("the RPC completed without a fault\n");
  return 3;
}
