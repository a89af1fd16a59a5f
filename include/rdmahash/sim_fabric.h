// rdmahash/sim_fabric.h — a simulated RDMA fabric in virtual time (`--fabric sim`).
//
// The same Fabric/Transport interface as LocalFabric (memory nodes are regions of this process),
// but every request takes simulated time: a discrete-event simulation of the memory nodes' NICs
// and CPUs and of the clients' CPUs, with the constants of a `SimProfile`. The design (event model,
// what is modelled and what is not, determinism, ordering) is described at the top of
// src/fabric/sim_fabric.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rdmahash/fabric.h"

namespace rdmahash {

// The constants of the simulation. Times in nanoseconds, rates per second.
struct SimProfile {
  std::string name;                  // "edr", or the file it was read from
  double latency_ns = 0;             // one-way latency client <-> memory node
  double nic_ops_per_s = 0;          // memory node NIC: requests per second it serves
  double link_bytes_per_s = 0;       // memory node link bandwidth
  double header_bytes = 0;           // bytes on the link per request besides its payload
  uint32_t qp_depth = 0;             // outstanding requests per (client, memory node) queue pair
  double rpc_ns = 0;                 // memory node CPU time per RPC handler
  double client_batch_ns = 0;        // client CPU per batch (between two round trips)
  double client_request_ns = 0;      // client CPU per request of a batch
  // How the client's CPU between two batches is priced: kFixed charges only client_batch_ns and
  // client_request_ns (deterministic); kMeasured adds the thread CPU time the client's own code
  // (scheme, engine, bench) really spent since its previous batch completed, times
  // client_cpu_scale (virtual times then vary from run to run: see sim_fabric.cpp).
  enum class ClientCpu : uint8_t { kFixed, kMeasured };
  ClientCpu client_cpu = ClientCpu::kFixed;  // profile key `client_cpu = fixed|measured` (optional)
  double client_cpu_scale = 1.0;             // profile key `client_cpu_scale` (optional, > 0)
};

// "fixed" or "measured".
const char* client_cpu_name(SimProfile::ClientCpu c);

// Seed 000's EDR constants (§5.1, model.h paper_cost_params): see sim_fabric.cpp.
SimProfile sim_profile_edr();
// "edr", or a key=value file (one `key = value` per line, '#' comments; every field above but
// name; client_cpu and client_cpu_scale may be left out: fixed, 1.0). Throws std::invalid_argument with a message naming the file and field.
SimProfile load_sim_profile(const std::string& name_or_path);
// Checks a profile's values (finite, positive where required); empty when valid.
std::string sim_profile_error(const SimProfile& p);
// The key=value text load_sim_profile reads.
std::string sim_profile_text(const SimProfile& p);

struct SimRunStats {
  uint64_t events = 0;        // simulation events processed (request arrivals, RPC runs, replies, wakes)
  double wall_seconds = 0;    // wall time of the run
  double virtual_ns = 0;      // virtual time the run covered
  double client_cpu_ns = 0;   // measured client CPU charged in virtual time (measured mode; else 0), before scaling
};

class SimFabric : public Fabric {
 public:
  // Runs `fn(client, transport)` for `clients` simulated clients, each a coroutine with its own
  // stack on the calling thread, one at a time in virtual-time order (see sim_fabric.cpp). `fn`
  // must not call execute() from a catch handler or a destructor run by unwinding (the clients
  // share the thread's exception state). Every client
  // starts at the current virtual time; returns when all have finished. Exceptions thrown by
  // `fn` are rethrown here (the first client's, in client order) after every client finished.
  virtual void run(uint32_t clients, const std::function<void(uint32_t, Transport&)>& fn) = 0;
  virtual const SimProfile& profile() const = 0;
  // Statistics of the last run().
  virtual SimRunStats last_run() const = 0;
};

// Memory nodes of `region_bytes` each. Throws std::invalid_argument for an invalid profile.
std::unique_ptr<SimFabric> make_sim_fabric(std::vector<uint64_t> region_bytes, SimProfile profile);

}  // namespace rdmahash
