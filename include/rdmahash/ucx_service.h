// rdmahash/ucx_service.h — memory nodes as long-lived services (`rdmahash serve`) and clients that
// connect to them by address (`rdmahash bench --connect`), over UCX without MPI.
//
// Connection establishment: a small TCP handshake per client and memory node, then UCX.
// Protocol version 2 (docs/security.md):
//   client → server  hello      "RDMAHASH" | u32 version = 2 | u32 flags = 0 | client nonce Nc (32 B)   (48 B)
//   server → client  reply      "RDMAHASH" | u32 status | u32 body bytes (≤ 1 MiB) | body
//                    status 2 (challenge): server nonce Ns (32 B, fresh per connection) | u32 flags
//                              (bit 0: a token is required)
//                    status 1 (refused): the reason, as text ("bad token", a version mismatch, ...)
//   client → server  proof      HMAC-SHA256(token, "rdmahash handshake v2: client proof" | Nc | Ns)  (32 B;
//                               zeros without a token)
//   server → client  reply      status 0 (welcome), after the proof is checked in constant time:
//                              u32 client id | u32 node | u32 nodes | u32 n | worker address (n B)
//                              | u32 n | region export (u64 base, u64 bytes, packed rkey) | u32 n | table spec
//                              | u32 n | host id (the kernel's boot id)
//                              With a token the body is crypto_secretbox-sealed (zero nonce) under
//                              HMAC-SHA256(token, "rdmahash handshake v2: welcome key" | Nc | Ns | proof):
//                              a key fresh per connection that only a holder of the token derives, so
//                              the server proves itself to the client and the rkey is hidden from a
//                              passive observer. A client with a token refuses a server that asks for none.
//                    or status 1 ("bad token"), and the connection is closed.
//   client → server  "BYE!" when it is done; the connection stays open until then.
// The token never crosses the wire; a replayed proof fails (Ns is fresh). A version-1 hello gets a
// refusal naming version 2.
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
// One UCX worker per client: the welcome carries the address of a worker the server made for
// that client alone (progressed by the same poll loop, destroyed when the client says goodbye or
// is lost). Over shared memory a UCX worker has ONE receive FIFO that every sender appends to by
// reserving an element (a CAS on the FIFO's head) and then filling it; a client killed between
// the two leaves an element nobody completes, and the worker never reads past it again. With one
// worker for all, that stalled every other client's RPCs for good (issue 26: `serve_kill_level`
// hung on a busy machine); with a worker each, it stalls only the dead client's own, which goes
// with it. Tested deterministically by a client that faults inside that window
// (tests/serve_dead_sender_test.sh).
//
// What a dead client leaves: the server learns of it when the kernel closes the TCP connection
// (kill -9 included), logs it ("lost"), destroys its worker and keeps serving every other client. What the client
// left in the table is each scheme's business (see the scheme headers): the server runs the
// scheme's ClientLossHandler, if any (linear inline: LinearLockSweeper recovers orphaned locks;
// race: the lost client's id goes on the death board, a record only: survivors finish an installed
// split or commit a tentative copy of any client, dead or alive, without looking at it).
//
// What a dead server leaves: its clients' TCP connections close. A client looks at them when a
// batch has waited 200 ms (an RPC nobody will answer) and every 1024 batches (over shared memory
// one-sided operations would go on "succeeding" on the dead node's segment) and then throws
// MemoryNodeLost: `bench --connect` stops with exit 1 and "memory node ADDR closed its connection".
//
// Out of descriptors: an accept() that fails with EMFILE / ENFILE (or ENOBUFS / ENOMEM) leaves
// the connection in the backlog and the listening socket alone for 100 ms (looking again at once
// would spin: it stays readable), logged 3 times and then at most once per 10 s; the clients
// already connected are served meanwhile (tests/serve_emfile_test.py).
//
// Limits and deadlines: every handshake message has a fixed length (16-byte header checked
// first, then the 32-byte nonce; the 32-byte proof), and the whole handshake must be done within
// 5 s of the accept; anything else (garbage, a slow or truncated message, bytes after the welcome
// other than "BYE!") drops that connection with one log line and disturbs nobody else. SIGPIPE is
// never raised (MSG_NOSIGNAL). Tested by 10^5 fuzzed handshakes against a running server
// (tests/serve_fuzz_test.py) and by connection churn with descriptor and RSS counts
// (tests/serve_churn_test.py).
//
// Privacy (docs/security.md): the server listens where UcxServerConfig::listen says (127.0.0.1 by
// default) and restricts UCX's own network devices to that address's interface ("lo" for the
// loopback) unless UCX_NET_DEVICES is set. A non-loopback listen address needs a token
// (UcxServerConfig::token, from --token-file); only a client that proves it holds the token gets
// the worker address and the remote key of the whole region. On the loopback without a token
// anyone on this host may join. Not protected: the one-sided traffic itself (not encrypted or
// authenticated per operation; on RDMA fabrics an rkey is a capability), so run on a trusted
// network or partition.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash {

// A scheme's recovery after a client died (its connection closed without goodbye): the server
// calls mark() at once, and repair() once `UcxServerConfig::recovery_grace` has passed with no
// further loss (another loss marks again and restarts the grace period). repair() returns a log
// line ("" for nothing worth saying). Both run on the server's thread, between progress calls.
// mark() learns the id this server gave the lost client (on memory node 0: the client's own id,
// UcxConnection::client_id); by repair() the server has served its worker for the whole grace
// period, so requests the dead client had posted before dying have been executed.
class ClientLossHandler {
 public:
  virtual ~ClientLossHandler() = default;
  virtual void mark(uint32_t client_id) = 0;
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
  // The shared secret clients must prove they hold (load_token_file); empty: none, which only a
  // loopback `listen` allows (create() throws std::invalid_argument otherwise).
  std::string token;
  // How the server waits for UCX work (ServeMode, rdmahash/ucx_fabric.h): kEvent sleeps in poll()
  // on the worker's event fd whenever idle; kHybrid first spins on ucp_worker_progress until
  // `spin` passes without an event; kPoll never sleeps; kAuto (the default) is kHybrid when the
  // server's UCX transports are TCP only (every READ is then an active message this server must
  // progress: a sleep costs each request a wakeup), else kEvent (shared memory / RDMA need no
  // server CPU for one-sided operations). The server logs the mode it resolved and the transports.
  using ServeMode = rdmahash::ServeMode;
  ServeMode serve_mode = ServeMode::kAuto;
  std::chrono::microseconds spin = kDefaultServeSpin;};

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
    uint64_t sleeps = 0;     // poll() calls made with the worker armed (each may sleep: a wakeup)
    uint64_t spin_pauses = 0;  // hybrid: spins that were preempted (then 100 ms of event mode)
    uint64_t accept_failures = 0;  // accept() out of descriptors or memory (then 100 ms without accepting)
  };
  virtual Stats stats() const = 0;
  // Serves clients, waiting in poll() on the listening socket, the clients' sockets and the UCX
  // worker's event fd (after a spin in hybrid mode; never blocking in poll mode), until stop() or
  // (handle_signals) SIGTERM / SIGINT.
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
  ClientWait client_wait = ClientWait::kPoll;  // how the fabric's transports wait (kAuto resolved)
  ReadCoalescing read_coalescing = ReadCoalescing::kOff;  // kAuto resolved (UcxFabricConfig)
};

// How a --connect client's fabric reaches and waits for its memory nodes (UcxFabricConfig's fields).
struct UcxClientOptions {
  // UcxFabricConfig::direct_access: a client reaches a same-host memory node's region with loads
  // and stores; its atomics keep the UCX path.
  bool direct_access = true;
  ClientWait client_wait = ClientWait::kAuto;  // UcxFabricConfig::client_wait
  std::chrono::microseconds client_spin = kDefaultClientSpin;
  ReadCoalescing read_coalescing = ReadCoalescing::kAuto;  // UcxFabricConfig::read_coalescing
};

// Connects to memory nodes 0..K-1 at `addresses` (host:port each). Throws FabricError naming the
// address: "memory node ADDR refused the connection: REASON", or why it could not be reached.
// `token`: the secret of --token-file (empty: none). A client with a token also checks that every
// server proves it holds the same one.
// `options`: the client fabric's settings (UcxClientOptions).
UcxConnection connect_ucx_servers(const std::vector<std::string>& addresses, const std::string& token = "",
                                  const UcxClientOptions& options = {});

// Reads the secret of a --token-file (trailing newline and spaces dropped). With `create`, a
// missing file is created with mode 0600 holding 32 random bytes as 64 hex digits (*created is set).
// Throws std::invalid_argument for a file that is not regular, that group or others may access
// (any of the mode's 077 bits), that cannot be read, or that holds fewer than 16 bytes.
std::string load_token_file(const std::string& path, bool create, bool* created = nullptr);

}  // namespace rdmahash
