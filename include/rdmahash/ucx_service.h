// rdmahash/ucx_service.h — memory nodes as long-lived services (`rdmahash serve`) and clients that
// connect to them by address (`rdmahash bench --connect`), over UCX without MPI.
//
// Connection establishment: a small TCP handshake per client and memory node, then UCX.
//   client → server  hello    "RDMAHASH" | u32 version = 1 | u32 flags = 0                (16 B)
//   server → client  reply    "RDMAHASH" | u32 status | u32 body bytes (≤ 1 MiB) | body
//                    status 0: u32 client id | u32 node | u32 nodes | u32 n | worker address (n B)
//                              | u32 n | region export (u64 base, u64 bytes, packed rkey) | u32 n | table spec
//                              | u32 n | host id (the kernel's boot id)
//                    status 1: the reason, as text
//   client → server  "BYE!" when it is done; the connection stays open until then.
// The client makes a UCP endpoint to the worker address and unpacks the rkey: from then on every
// READ, WRITE, CAS and FAA is one-sided, exactly as in an mpirun job, and RPCs are active messages
// answered on the reply endpoint UCP makes for them. Integers are little endian.
//
// Endpoint error handling. Over shared memory on one host the memory node's CPU takes no part in
// READ/WRITE/CAS/FAA, and UCX 1.13 offers shared memory only to endpoints without peer failure
// handling (with UCP_ERR_HANDLING_MODE_PEER a loopback client falls back to TCP: 80 k gets/s
// instead of 1.9 M). Elsewhere (another host, or UCX_TLS without shared memory) the server
// answers every one-sided request itself, and under UCP_ERR_HANDLING_MODE_NONE a reply to a
// client that died is a fatal UCX error that aborts the server ("Endpoint timeout", seen over
// TCP). So a client asks for PEER mode unless the server reports this host's boot id and UCX_TLS
// allows shared memory; the server's endpoints inherit the mode from the client's wireup.
// Known limit (UCX 1.13, TCP): a client that dies while the server is answering its
// software-emulated READs can still make UCX abort the server ("Fatal: unexpected error:
// Endpoint timeout" from ucp_request_send in ucp_get_req_handler, despite PEER mode; 1 of 5 kills
// in tests). Over shared memory the server takes no part in one-sided operations and survives
// every kill; over TCP, restart the server (or keep its table on --pm-path).
//
// What a dead client leaves: the server learns of it when the kernel closes the TCP connection
// (kill -9 included), logs it ("lost") and keeps serving every other client. What the client
// left in the table is each scheme's business (see the scheme headers): the server runs the
// scheme's ClientLossHandler, if any (linear inline: LinearLockSweeper recovers orphaned locks).
//
// What a dead server leaves: its clients' TCP connections close. A client looks at them when a
// batch has waited 200 ms (an RPC nobody will answer) and every 1024 batches (over shared memory
// one-sided operations would go on "succeeding" on the dead node's segment) and then throws
// MemoryNodeLost: `bench --connect` stops with exit 1 and "memory node ADDR closed its connection".
//
// Limits and deadlines: a hello must arrive whole within 5 s and be exactly 16 bytes; anything
// else (garbage, a slow or truncated hello, bytes after the hello other than "BYE!") drops that
// connection with one log line and disturbs nobody else. SIGPIPE is never raised (MSG_NOSIGNAL).
//
// Privacy: the server listens where UcxServerConfig::listen says (127.0.0.1 by default) and
// restricts UCX's own network devices to that address's interface ("lo" for the loopback) unless
// UCX_NET_DEVICES is set. There is no authentication yet: whoever reaches the port gets the
// remote key of the whole region.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "rdmahash/fabric.h"

namespace rdmahash {

// A scheme's recovery after a client died (its connection closed without goodbye): the server
// calls mark() at once, and repair() once `UcxServerConfig::recovery_grace` has passed with no
// further loss (another loss marks again and restarts the grace period). repair() returns a log
// line ("" for nothing worth saying). Both run on the server's thread, between progress calls.
class ClientLossHandler {
 public:
  virtual ~ClientLossHandler() = default;
  virtual void mark() = 0;
  virtual std::string repair() = 0;
};

struct UcxServerConfig {
  uint32_t node = 0;           // this server is memory node `node` of `nodes`
  uint32_t nodes = 1;
  uint64_t region_bytes = 0;
  std::byte* region_address = nullptr;  // expose this memory (a pmem file mapping) instead of allocating
  std::string listen = "127.0.0.1:18515";  // IPv4 host:port; port 0 picks a free port (see address())
  std::string table_spec;      // sent to every client: what the table in the region is
  bool handle_signals = false; // run() returns on SIGTERM / SIGINT (blocked, taken through a signalfd)
  std::chrono::milliseconds recovery_grace{1000};  // see ClientLossHandler
  // How the server waits for UCX work. kEvent: progress until idle, arm the worker, sleep in
  // poll() on its event fd (right where one-sided operations need no target CPU: shared memory).
  // kPoll: first keep progressing while work arrives, until `spin` passes without any (at most
  // 2 ms at a time, so the TCP sockets are still looked at), then as kEvent — over TCP every READ
  // is an active message the server must progress, and waking from poll() costs each one a sleep.
  // The default stays kEvent: on this 2-core machine, shared with other work, poll mode was slower
  // over TCP (the spin takes the core the client needs; docs/results.md), so it is opt-in.
  enum class ServeMode { kPoll, kEvent };
  ServeMode serve_mode = ServeMode::kEvent;
  std::chrono::microseconds spin{200};
};

class UcxServer {
 public:
  // Maps the region and binds the listening socket. Throws FabricError (InvalidArgument for a bad
  // listen address).
  static std::unique_ptr<UcxServer> create(const UcxServerConfig& config);
  virtual ~UcxServer() = default;
  // The memory node's fabric: load the table into fabric().local_region(node) and register the
  // scheme's RPCs before run().
  virtual Fabric& fabric() = 0;
  virtual std::string address() const = 0;  // host:port as bound
  virtual void set_table_spec(std::string spec) = 0;
  // What to repair after a lost client (none: nothing). Set before run().
  virtual void set_loss_handler(std::unique_ptr<ClientLossHandler> handler) = 0;
  struct Stats {
    uint64_t connected = 0;  // handshakes completed
    uint64_t finished = 0;   // clients that said goodbye
    uint64_t lost = 0;       // connections closed without goodbye (killed clients)
    uint64_t dropped = 0;    // connections dropped during the handshake (bad input, deadline)
    uint64_t live = 0;       // connected now
    uint64_t repairs = 0;    // ClientLossHandler::repair() passes run
  };
  virtual Stats stats() const = 0;
  // Serves clients, blocking in poll() on the listening socket, the clients' sockets and the UCX
  // worker's event fd (never busy-polls), until stop() or (handle_signals) SIGTERM / SIGINT.
  // Returns the signal number, or 0 after stop(). One line per client event goes to `log`.
  virtual int run(std::FILE* log) = 0;
  // Makes run() return; callable from any thread.
  virtual void stop() = 0;
};

struct UcxConnection {
  // Memory nodes 0..K-1 in the order of the addresses. A transport of it executes batches as
  // UcxFabric's do; local_region() is empty and register_rpc() is refused.
  std::unique_ptr<Fabric> fabric;
  uint32_t client_id = 0;  // given by memory node 0; unique over its life
  std::string table_spec;  // memory node 0's
};

// Connects to memory nodes 0..K-1 at `addresses` (host:port each). Throws FabricError naming the
// address: "memory node ADDR refused the connection: REASON", or why it could not be reached.
// `direct_access`: UcxFabricConfig::direct_access of the client's fabric (a client reaches a
// same-host memory node's region with loads and stores; its atomics keep the UCX path).
UcxConnection connect_ucx_servers(const std::vector<std::string>& addresses, bool direct_access = true);

}  // namespace rdmahash
