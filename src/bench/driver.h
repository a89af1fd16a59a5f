// The benchmark driver: builds the table, runs every point of the sweep, reports.
//
// Sweep order: for each load factor the table is built afresh (bulk load on the memory nodes);
// then each workload runs in the order given. Every point starts from a state its row states
// (load_factor_start/end): by default the bulk-loaded table — the shards are reloaded (UCX: by the
// memory nodes, between two barriers) before any point that follows a point that wrote — or, with
// --keep-table, the table the previous point left. Insert points also draw new keys that no earlier
// point, repetition or client used. YCSB: each repetition is a load phase into an empty table and
// then a run phase on what it loaded. `get` runs once per --read-size, `raw-read` once per
// --read-bytes. Before a table's first point every client touches each 4 KiB page of every shard
// (one 8-byte READ each; --cold skips it). Every point is measured between two barriers over all
// clients. The run logic is shared (sweep()); only the fabric-specific parts differ (Backend).
#pragma once

#include <cstdio>
#include <string>

#include "bench/options.h"
#include "rdmahash/ucx_fabric.h"

namespace rdmahash::bench {

// In-process run (`--fabric local`): memory nodes and client threads in this process.
// Returns the process exit status. Throws InvalidArgument for bad options.
int run_local(const BenchOptions& o);

// Simulated run (`--fabric sim`, rdmahash/sim_fabric.h): memory nodes in this process, --clients
// simulated clients in virtual time with the constants of --sim-profile. Throughput and latencies
// are virtual; rows carry the profile and the simulation's events per second of wall time.
// Throws InvalidArgument for bad options (a bad profile too).
int run_sim(const BenchOptions& o);

// UCX run (`--fabric ucx`): call on every MPI rank after MPI_Init. Returns the exit status.
// Throws InvalidArgument only for errors every rank detects alike (before any communication);
// any other exception may be one rank's alone, and the caller must abort the job.
int run_ucx(const BenchOptions& o);

// A client of running memory nodes (`--connect ADDR...`, served by `rdmahash serve`): one client in
// this process; the table is the servers' (its options come from memory node 0 and table options
// on the command line are refused by the CLI), shared with whatever other clients run, so every
// point continues on the table as it is (--keep-table) and rows' load factors count this client's
// inserts and erases only. The client index in the workload (new keys, kv-mix value tags, history
// client ids) is the id memory node 0 gave it, modulo kConnectClientIds.
constexpr uint32_t kConnectClientIds = 1024;
int run_connect(const BenchOptions& o);

// `rdmahash serve`: builds memory node `node` of o.memory_nodes (formats and bulk-loads its shard,
// or reopens --pm-path), then serves clients at `listen` until SIGTERM / SIGINT. `capacity`: the
// records the table may come to hold (0: records + max(records, 100000)). Prints one line when it
// is ready ("... listening on HOST:PORT") and one when it stops. Throws InvalidArgument for bad options.
struct ServeOptions {
  std::string listen = "127.0.0.1:18515";
  uint32_t node = 0;
  uint64_t capacity = 0;
  std::string token_file;  // created if missing; required for a non-loopback --listen
};
int run_serve(const BenchOptions& o, const ServeOptions& s);

}  // namespace rdmahash::bench
